//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// reflect is the bench lab's xdp-reflector: the least an in-kernel fast path
// can do to a gateway's frame. A VXLAN frame over IPv4 carrying IPv4 loses
// its outer headers, its inner Ethernet header is addressed from the gateway
// (src_mac) to the router (dst_mac), its inner source address becomes the
// egress IP (egress, the IP and UDP checksums updated for it), and it goes
// back out of the interface it came in on (XDP_TX). Everything else passes.
// On a veth, the peer needs an XDP program for XDP_TX to arrive (pass).
// The same rewrite as the afxdp-reflector's (bench/lab/reflector.go).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PORT_VXLAN 4789
#define OUTER_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr) + 8)

// Set by the loader before the program is loaded.
volatile const __u8 dst_mac[ETH_ALEN];
volatile const __u8 src_mac[ETH_ALEN];
volatile const __be32 egress;

// csum_replace4 updates a ones'-complement checksum for a 32-bit field
// that changed from from to to (RFC 1624).
static __always_inline __u16 csum_replace4(__u16 check, __be32 from, __be32 to)
{
	__u32 sum = (__u16)~check;
	sum += (__u16)~from + (__u16)~(from >> 16);
	sum += (__u16)to + (__u16)(to >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

SEC("xdp")
int reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *oip = (void *)(eth + 1);
	struct udphdr *oudp = (void *)(oip + 1);

	if ((void *)(oudp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || oip->ihl != 5 ||
	    oip->protocol != IPPROTO_UDP || oudp->dest != bpf_htons(PORT_VXLAN))
		return XDP_PASS;
	if (bpf_xdp_adjust_head(ctx, OUTER_LEN))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return XDP_DROP; // decapsulated already: not a frame to pass on
	for (int i = 0; i < ETH_ALEN; i++) {
		eth->h_dest[i] = dst_mac[i];
		eth->h_source[i] = src_mac[i];
	}
	__be32 old = ip->saddr, new = egress;
	if (ip->protocol == IPPROTO_UDP && udp->check)
		udp->check = csum_replace4(udp->check, old, new);
	ip->check = csum_replace4(ip->check, old, new);
	ip->saddr = new;
	return XDP_TX;
}

// pass is for the peer of the reflector's veth: a veth's XDP_TX frames are
// queued to its peer, whose NAPI the kernel schedules only when the peer has
// an XDP program; this one lets every frame on to the kernel.
SEC("xdp")
int pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
