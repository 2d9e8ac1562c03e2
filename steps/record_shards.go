package steps

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// RecordShardName is the name of chunk n (from 0) of the shard of step id:
// "maasctl-inventory.<id with / replaced by .>", then ".<n>" for n > 0. An
// ID that does not map to a valid, unambiguous ConfigMap name that way
// (upper case, other characters, a numeric last segment, too long) gets a
// hash of the ID appended instead of the unmappable rest.
func RecordShardName(id string, n int) string {
	base := RecordConfigMap + "." + shardStem(id)
	if n > 0 {
		base += "." + strconv.Itoa(n)
	}
	return base
}

var shardSegment = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// shardStem maps a step ID to the DNS-1123 labels of its shard name.
func shardStem(id string) string {
	segs := strings.Split(id, "/")
	clean := len(id) <= 180
	for _, s := range segs {
		if !shardSegment.MatchString(s) {
			clean = false
		}
	}
	if _, err := strconv.Atoi(segs[len(segs)-1]); err == nil {
		clean = false // would read as a chunk number
	}
	if clean {
		return strings.Join(segs, ".")
	}
	sum := sha256.Sum256([]byte(id))
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '/' || r == '.':
			b.WriteRune('.')
		default:
			b.WriteRune('-')
		}
		if b.Len() >= 160 {
			break
		}
	}
	var out []string
	for _, s := range strings.Split(b.String(), ".") {
		if s = strings.Trim(s, "-"); s != "" {
			out = append(out, s)
		}
	}
	out = append(out, "h"+hex.EncodeToString(sum[:])[:10])
	return strings.Join(out, ".")
}

// recordChunks encodes entries (of one step, in order) as JSON arrays of
// at most limit bytes each, one entry per line (an entry larger than limit
// gets a chunk of its own). The chunks decode to the entries in order
// (decodeRecordList; JSON is YAML, so an older maasctl reads them too). No
// entries: no chunk. JSON rather than YAML: sigs.k8s.io/yaml.Marshal
// allocated about 100 KB per entry (433 MB of a 1,000-model install,
// issue 16); encoding/json allocates a few hundred bytes.
func recordChunks(entries []RecordEntry, limit int) ([]string, error) {
	var out []string
	var cur strings.Builder
	flush := func() {
		cur.WriteString("\n]\n")
		out = append(out, cur.String())
		cur.Reset()
	}
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode record entry %s: %w", e, err)
		}
		// Each entry adds ",\n" (or "[\n") before it; a chunk ends "\n]\n".
		if cur.Len() > 0 && cur.Len()+2+len(b)+3 > limit {
			flush()
		}
		if cur.Len() == 0 {
			cur.WriteString("[\n")
		} else {
			cur.WriteString(",\n")
		}
		cur.Write(b)
	}
	if cur.Len() > 0 {
		flush()
	}
	return out, nil
}

// decodeRecordList decodes one stored chunk of the record: a JSON array
// (recordChunks) or the YAML list older maasctl versions wrote.
func decodeRecordList(data string) ([]RecordEntry, error) {
	var list []RecordEntry
	if strings.HasPrefix(data, "[") {
		if err := json.Unmarshal([]byte(data), &list); err == nil {
			return list, nil
		}
	}
	list = nil
	if err := yaml.Unmarshal([]byte(data), &list); err != nil {
		return nil, err
	}
	return list, nil
}
