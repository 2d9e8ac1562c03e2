package bench

import "sort"

// Linearity fits wall time and requests against the model count, by least
// squares over every point and interval by interval.
type Linearity struct {
	WallPerModel     ms      `json:"wallPerModelMs"`
	WallR2           float64 `json:"wallR2"`
	RequestsPerModel float64 `json:"requestsPerModel"`
	RequestsR2       float64 `json:"requestsR2"`
	// MarginalRatio is the wall time per model of the last interval over
	// that of the first (1 = linear); 0 with fewer than three points.
	MarginalRatio float64 `json:"marginalRatio"`
	// Intervals are the cost per model between consecutive counts, in
	// ascending order of the counts.
	Intervals []Interval `json:"intervals,omitempty"`
}

// Interval is the cost per added model from From to To models: the
// difference of the two points' wall times (ms) and requests, divided by
// To − From.
type Interval struct {
	From             int     `json:"from"`
	To               int     `json:"to"`
	WallPerModel     ms      `json:"wallPerModelMs"`
	RequestsPerModel float64 `json:"requestsPerModel"`
}

// fitPoint is one measured count: its wall time and requests (reads plus
// writes).
type fitPoint struct {
	models   int
	wall     ms
	requests int64
}

func scaleFit(points []ScalePoint) []fitPoint {
	var out []fitPoint
	for _, p := range points {
		out = append(out, fitPoint{models: p.Models, wall: p.Wall, requests: p.Reads + p.Writes})
	}
	return out
}

// linearity fits points (in any order); nil with fewer than two distinct
// counts.
func linearity(points []fitPoint) *Linearity {
	points = append([]fitPoint(nil), points...)
	sort.Slice(points, func(i, j int) bool { return points[i].models < points[j].models })
	var xs, wall, reqs []float64
	for i, p := range points {
		if i > 0 && p.models == points[i-1].models {
			continue
		}
		xs = append(xs, float64(p.models))
		wall = append(wall, float64(p.wall))
		reqs = append(reqs, float64(p.requests))
	}
	if len(xs) < 2 {
		return nil
	}
	l := &Linearity{}
	_, b, r2 := linearFit(xs, wall)
	l.WallPerModel, l.WallR2 = ms(b), r2
	_, b, r2 = linearFit(xs, reqs)
	l.RequestsPerModel, l.RequestsR2 = b, r2
	for i := 1; i < len(xs); i++ {
		dx := xs[i] - xs[i-1]
		l.Intervals = append(l.Intervals, Interval{From: int(xs[i-1]), To: int(xs[i]),
			WallPerModel: ms((wall[i] - wall[i-1]) / dx), RequestsPerModel: (reqs[i] - reqs[i-1]) / dx})
	}
	if n := len(l.Intervals); n >= 2 && l.Intervals[0].WallPerModel > 0 {
		l.MarginalRatio = float64(l.Intervals[n-1].WallPerModel / l.Intervals[0].WallPerModel)
	}
	return l
}
