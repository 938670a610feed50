// Package access says what the commands people run against a cluster
// (egret status, trace, check and natlog) ask of the API server, and which
// shipped role grants it (deploy/rbac/users.yaml, the Helm chart's
// users-rbac.yaml). The commands name the role when the API server refuses
// them; deploy's tests check that the roles grant every request listed here.
package access

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The shipped roles for people, as docs/operations.md ("Access for people")
// binds them.
const (
	// Viewer is the ClusterRole for egret status and egret trace: reads only.
	Viewer = "egret-viewer"
	// Checker is the ClusterRole egret check needs besides Viewer, in the
	// namespaces it probes: its probe pods and their logs.
	Checker = "egret-checker"
	// NATLog is the Role, in Egret's namespace, that lets egret natlog
	// run the query in each gateway pod (pods/exec).
	NATLog = "egret-natlog"
)

// Where a request goes.
const (
	// Cluster is cluster-scoped objects, or namespaced ones in every
	// namespace at once.
	Cluster = "cluster"
	// Egret is the namespace Egret is installed in (egret-system).
	Egret = "egret"
	// Probed is the namespaces egret check starts probe pods in.
	Probed = "probed"
)

// Request is one kind of API request a command makes.
type Request struct {
	Group, Resource, Subresource string
	Verbs                        []string
	// Names are the only objects it asks for; empty, any.
	Names []string
	// Where is Cluster, Egret or Probed.
	Where string
}

// Command is what one command asks of the API server and the roles that
// grant it between them.
type Command struct {
	Roles    []string
	Requests []Request
}

// reads are what egret status reads: the cluster model (cluster.Kube
// lists and watches every kind) and the EgressIPs' Events.
var reads = []Request{
	{Group: "k8s.ovn.org", Resource: "egressips", Verbs: []string{"list", "watch"}, Where: Cluster},
	{Group: "k8s.ovn.org", Resource: "egressiptraffics", Verbs: []string{"list", "watch"}, Where: Cluster},
	{Resource: "nodes", Verbs: []string{"list", "watch"}, Where: Cluster},
	{Resource: "namespaces", Verbs: []string{"list", "watch"}, Where: Cluster},
	{Resource: "pods", Verbs: []string{"list", "watch"}, Where: Cluster},
	{Resource: "events", Verbs: []string{"list"}, Where: Cluster},
}

// Commands are the commands that read a cluster, by name.
var Commands = map[string]Command{
	"status": {Roles: []string{Viewer}, Requests: reads},
	// The agents' configuration: the two ConfigMaps deploy/ ships.
	"trace": {Roles: []string{Viewer}, Requests: append(append([]Request{}, reads...),
		Request{Resource: "configmaps", Verbs: []string{"get"}, Names: []string{"egret-gateway", "egret-steer"}, Where: Egret})},
	// The probe pods: created, watched for their answer (get), read
	// (pods/log when the termination message is empty) and deleted.
	"check": {Roles: []string{Viewer, Checker}, Requests: append(append([]Request{}, reads...),
		Request{Resource: "pods", Verbs: []string{"create", "get", "delete", "deletecollection"}, Where: Probed},
		Request{Resource: "pods", Subresource: "log", Verbs: []string{"get"}, Where: Probed})},
	// The gateway pods, and the query run in each: WebSocket exec is a
	// GET, the SPDY fallback a POST (create).
	"natlog": {Roles: []string{NATLog}, Requests: []Request{
		{Resource: "pods", Verbs: []string{"list"}, Where: Egret},
		{Resource: "pods", Subresource: "exec", Verbs: []string{"get", "create"}, Where: Egret}}},
}

// Explain adds to err, when it is the API server refusing command, what
// the command needs and the roles that grant it; other errors it returns
// as they are.
func Explain(command string, err error) error {
	c, ok := Commands[command]
	if !apierrors.IsForbidden(err) || !ok {
		return err
	}
	var needs []string
	for _, r := range c.Requests {
		res := r.Resource
		if r.Subresource != "" {
			res += "/" + r.Subresource
		}
		if r.Group != "" {
			res += "." + r.Group
		}
		needs = append(needs, strings.Join(r.Verbs, ",")+" "+res)
	}
	return fmt.Errorf("%w\n(egret %s needs %s: the roles %s grant it, docs/operations.md#access-for-people)",
		err, command, strings.Join(needs, "; "), strings.Join(c.Roles, " and "))
}
