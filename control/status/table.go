package status

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable prints r for people: the EgressIPs (when objects is true)
// and then the pods, each problem and Event on a line of its own below
// its row; now dates the Events ("5m0s ago").
func (r *Report) WriteTable(w io.Writer, objects bool, now time.Time) error {
	var b strings.Builder
	if objects {
		var t table
		t.row("EGRESSIP", "IP", "NODE", "STANDBY", "STANDBY STATE", "PODS")
		for _, o := range r.EgressIPs {
			name, pods := o.Name, fmt.Sprint(o.Pods)
			if len(o.IPs) == 0 {
				t.row(name, "-", "-", "-", "-", pods)
			}
			for _, ip := range o.IPs {
				t.row(name, ip.IP, orDash(ip.Node), orDash(ip.Standby), ip.StandbyState, pods)
				name, pods = "", ""
			}
			for _, p := range o.Problems {
				t.note("problem: " + p)
			}
			for _, e := range o.Events {
				t.note(fmt.Sprintf("event: %s ago, %s %s: %s (x%d)", now.Sub(e.LastSeen).Round(time.Second), e.Type, e.Reason, e.Message, e.Count))
			}
		}
		t.write(&b)
		b.WriteString("\n")
	}
	var t table
	t.row("NAMESPACE", "POD", "NODE", "EGRESSIP", "STATE", "SOURCES (GATEWAYS)")
	for _, p := range r.Pods {
		srcs := make([]string, len(p.Sources))
		for i, s := range p.Sources {
			srcs[i] = fmt.Sprintf("%v (%s)", s.IP, strings.Join(s.Gateways, ","))
		}
		if len(srcs) == 0 {
			srcs = []string{"-"}
		}
		owner := orDash(p.EgressIP)
		if len(p.Destinations) > 0 {
			owner += " +by destination"
		}
		t.row(p.Namespace, p.Name, dash(p.Node), owner, p.State, strings.Join(srcs, ", "))
		for _, d := range p.Destinations {
			if d.Excluded {
				t.note(fmt.Sprintf("to %v: not through egress IPs (an exclusion of EgressIP %s)", d.Network, d.EgressIP))
			} else {
				t.note(fmt.Sprintf("to %v: EgressIP %s", d.Network, d.EgressIP))
			}
		}
		for _, pr := range p.Problems {
			t.note("problem: " + pr)
		}
	}
	t.write(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// table lays out rows in columns as wide as their widest cell, with notes
// (lines of their own, indented) below the row they follow.
type table struct {
	rows  [][]string
	notes map[int][]string // by the index of the row they follow
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) note(s string) {
	if t.notes == nil {
		t.notes = map[int][]string{}
	}
	t.notes[len(t.rows)-1] = append(t.notes[len(t.rows)-1], s)
}

func (t *table) write(b *strings.Builder) {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	for i, r := range t.rows {
		var line strings.Builder
		for j, c := range r {
			fmt.Fprintf(&line, "%-*s  ", width[j], c)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		for _, n := range t.notes[i] {
			b.WriteString("    " + n + "\n")
		}
	}
}

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return dash(*s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
