package trace

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints t for a terminal: the pod and destination, each check
// (the deciding one marked), the candidate gateways, and the verdict.
func (t *Trace) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "POD\t%s on node %s\n", t.Pod, t.Node)
	fmt.Fprintf(tw, "DESTINATION\t%s\n", t.Destination)
	sel := "none"
	if len(t.SelectedBy) > 0 {
		sel = strings.Join(t.SelectedBy, ", ")
	}
	if t.EgressIP != nil {
		sel += " (owner: " + *t.EgressIP + ")"
	}
	fmt.Fprintf(tw, "SELECTED BY\t%s\n", sel)
	fmt.Fprintln(tw, "\nCHECK\tRESULT\tDETAIL")
	for _, c := range t.Checks {
		res := c.Result
		if c.Decides {
			res += " (decides)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, c.Detail)
	}
	if len(t.Gateways) > 0 {
		fmt.Fprintln(tw, "\nGATEWAY\tEGRESS IP\tPOD FLOW LIMIT\tEGRESS IP FLOW LIMIT\tCONNTRACK MAX")
		for _, g := range t.Gateways {
			fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\n", g.Node, g.EgressIP, g.PodFlowLimit, g.EgressIPFlowLimit, g.ConntrackMax)
		}
	}
	fmt.Fprintln(tw)
	if t.Spread != "" {
		fmt.Fprintf(tw, "SPREAD\t%s\n", t.Spread)
	}
	fmt.Fprintf(tw, "VERDICT\t%s\n", t.Verdict)
	if t.SeenAs != "" {
		fmt.Fprintf(tw, "SEEN AS\t%s\n", t.SeenAs)
	}
	fmt.Fprintf(tw, "REASON\t%s\n", t.Reason)
	if t.Setting != "" {
		fmt.Fprintf(tw, "TO CHANGE\t%s\n", t.Setting)
	}
	return tw.Flush()
}
