package gwagent

import (
	"slices"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
)

// agree keeps, of each object's status items, those fresh also has: a
// cache whose watch stalled, or has not caught up since contact returned,
// may still hold a placement that moved. Objects fresh does not know (all
// of them while fresh is nil) host nothing.
func agree(eips []*egressv1.EgressIP, fresh cluster.Statuses) []*egressv1.EgressIP {
	out := make([]*egressv1.EgressIP, 0, len(eips))
	for _, e := range eips {
		if e == nil {
			continue
		}
		f := fresh[e.Name]
		items := slices.DeleteFunc(slices.Clone(e.Status.Items), func(it egressv1.EgressIPStatusItem) bool {
			return !slices.Contains(f.Items, it)
		})
		if len(items) != len(e.Status.Items) {
			c := e.DeepCopy()
			c.Status.Items = items
			e = c
		}
		out = append(out, e)
	}
	return out
}
