// Package xdp holds Egret's XDP program and its loader: the program sends
// tunnel traffic to local VTEPs and traffic to hosted egress IPs to the AF_XDP
// socket of its receive queue and passes everything else to the kernel.
package xdp

// The generated egret_bpfel.go/.o and egret_bpfeb.go/.o are committed so that
// `go build` needs no clang; rerun `go generate` after editing egret.c.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang -cflags "-O2 -g -Wall -Werror" egret egret.c -- -I/usr/include/x86_64-linux-gnu
