package main

// The generated reflect_bpfel.go/.o and reflect_bpfeb.go/.o are committed so
// that `go build` needs no clang (as gateway/xdp's are); rerun `go generate
// ./bench/lab` after editing reflect.c.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go@v0.22.0 -cc clang -cflags "-O2 -g -Wall -Werror" reflect reflect.c -- -I/usr/include/x86_64-linux-gnu
