package steps

import "golang.org/x/sync/errgroup"

// inParallel calls fn(i) for every i in [0, n), at most limit calls at a
// time (errgroup.Group.SetLimit), and returns once all of them returned.
// fn reports its results through what it captures (one slot per i).
func inParallel(n, limit int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(max(limit, 1))
	for i := range n {
		g.Go(func() error { fn(i); return nil })
	}
	_ = g.Wait()
}
