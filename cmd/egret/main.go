// Command egret is Egret's one binary: the gateway data plane, the controller,
// the steer agent, the lab and the demo, as subcommands.
package main

import (
	"fmt"
	"os"
	"sort"
)

// command is one subcommand; each lives in its own file and registers itself.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; called from init in the subcommand's file.
func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("egret: subcommand registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: egret <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "egret: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "egret "+os.Args[1]+":", err)
		os.Exit(1)
	}
}
