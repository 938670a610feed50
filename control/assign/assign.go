package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Assign computes, for every EgressIP object, which node hosts each of its
// egress IPs, keeping every current assignment that is still valid and
// balancing new ones over the eligible nodes. It is deterministic: the order
// of objects, nodes, IPs and status items does not matter. It fails only on
// duplicate object or node names, which Kubernetes never produces.
//
// The controller runs it through Incremental, which returns the same result
// and reuses the last one where it can.
func Assign(objects []Object, nodes []Node, opts Options) (Result, error) {
	a, err := assignAll(objects, nodes, opts)
	if err != nil {
		return Result{}, err
	}
	return a.result(), nil
}

// assignAll is Assign up to its result, returning its working state.
func assignAll(objects []Object, nodes []Node, opts Options) (*assigner, error) {
	a, err := newAssigner(nodes, opts)
	if err != nil {
		return nil, err
	}
	if err := a.load(objects); err != nil {
		return nil, err
	}
	return a, nil
}

// assigner is the working state of one Assign call: the nodes and their
// indexes, the objects, and who claims and owns each egress IP.
type assigner struct {
	opts   Options
	nodes  []nodeState // ordered by name
	byName map[string]int
	// eligible indexes nodes that may host egress IPs, in name order.
	eligible []int32
	// groups index the eligible nodes by subnet, so an IP is checked only
	// against the nodes that can possibly hold it.
	groups []subnetGroup
	// nodeAddrs are the nodes' own addresses; an egress IP equal to one is a conflict.
	nodeAddrs map[netip.Addr]string

	objs  map[string]*objState
	names []string // object names, sorted

	claims map[netip.Addr][]*objState // every object listing the IP
	owner  map[netip.Addr]*objState   // the claimant allowed to use it
	multi  map[netip.Addr]struct{}    // IPs with two or more claimants

	nodeProblems []Event
	noStandby    []Event  // NoStandbyNode, one per assigned IP without a standby
	unannotated  []string // labelled nodes without interface subnets, by name
	// Explanations precomputed per node set for NoMatchingNodeFound messages.
	noEligibleMsg string
	subnetList    [2]string // per family (0: IPv4, 1: IPv6)

	scratchAddrs []netip.Addr
	scratchNodes []int32
	visited      []bool
}

// newAssigner builds an assigner over nodes with no objects yet. It fails
// only on two nodes with one name.
func newAssigner(nodes []Node, opts Options) (*assigner, error) {
	a := &assigner{
		opts:   opts,
		objs:   map[string]*objState{},
		claims: map[netip.Addr][]*objState{},
		owner:  map[netip.Addr]*objState{},
		multi:  map[netip.Addr]struct{}{},
	}
	if err := a.setNodes(nodes); err != nil {
		return nil, err
	}
	return a, nil
}

// load assigns a whole set of objects from scratch (the state must be empty).
func (a *assigner) load(objects []Object) error {
	seen := make(map[string]struct{}, len(objects))
	for _, o := range objects {
		if _, dup := seen[o.Name]; dup {
			return fmt.Errorf("EgressIP %q is listed twice; each object must appear once", o.Name)
		}
		seen[o.Name] = struct{}{}
	}
	states := make([]*objState, 0, len(objects))
	inputs := make(map[*objState][]StatusItem, len(objects))
	for _, o := range objects {
		s := a.parseObject(o)
		s.status = statusAddrs(o.Status)
		s.standbys = o.Standbys
		a.objs[o.Name] = s
		inputs[s] = o.Status
		states = append(states, s)
	}
	slices.SortFunc(states, func(x, y *objState) int { return strings.Compare(x.name, y.name) })
	a.names = make([]string, len(states))
	for i, s := range states {
		a.names[i] = s.name
		a.addClaims(s)
	}
	for ip := range a.claims {
		a.decideOwner(ip)
	}
	for _, s := range states {
		a.keep(s, inputs[s])
	}
	// A failed owner's IP goes to its standby before anything new is
	// placed, so new IPs cannot take the room the takeover needs.
	for _, s := range states {
		a.takeOver(s)
	}
	for _, s := range states {
		a.placeObject(s)
	}
	a.chooseStandbys()
	return nil
}

func (a *assigner) objectResult(s *objState) ObjectResult {
	r := ObjectResult{Name: s.name, Status: make([]Assignment, len(s.placed))}
	for i, p := range s.placed {
		r.Status[i] = Assignment{Node: a.nodes[p.node].name, EgressIP: p.addr.String(), Addr: p.addr, Interface: p.iface}
		if p.standby >= 0 {
			r.Status[i].Standby = a.nodes[p.standby].name
		}
	}
	return r
}

// result returns the whole assignment.
func (a *assigner) result() Result {
	r := Result{Objects: make([]ObjectResult, 0, len(a.names))}
	for _, name := range a.names {
		s := a.objs[name]
		r.Objects = append(r.Objects, a.objectResult(s))
		r.Events = a.events(s, r.Events)
	}
	sortEvents(r.Events)
	r.NodeProblems = slices.Clone(a.nodeProblems)
	r.NoStandby = slices.Clone(a.noStandby)
	sortEvents(r.NoStandby)
	return r
}
