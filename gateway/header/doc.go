// Package header provides allocation-free views of packet headers: Ethernet
// (with 802.1Q/802.1ad tags), IPv4, IPv6 (with an extension-header walk),
// UDP, TCP, ICMPv4, ICMPv6, VXLAN and Geneve, plus RFC 1071 checksums and
// RFC 1624 incremental checksum updates.
//
// A header is a byte-slice type with accessor and setter methods. The caller
// validates a header once (length checks, then a Fixed view) and then reads
// it without further checks: accessors index the slice directly and panic if
// called on a slice shorter than the header's minimum length, exactly like
// indexing.
// Addresses are returned as arrays (copies), so an old address can be kept
// across a setter call for incremental checksum updates.
package header
