// Package flowsync replicates a gateway's flows to the standby gateway of
// each egress IP it hosts, so that the standby holds them (backup flows
// that answer nothing) and carries every connection on when it takes the
// IP over. docs/continuity.md describes the protocol and its guarantees.
//
// The sending side (Sender) finds changes by scanning the flow table every
// Interval against a shadow of what it told each peer: the workers do
// nothing for it, no ring, no lock, no allocation on the packet path. The
// receiving side (Receiver) adopts the flows into its own pipeline
// (gateway.Pipeline.Adopt), which is what makes them live at once when the
// egress IP arrives.
package flowsync

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// DefaultPort is the sync listener's port, on the node's InternalIP like
// the health service's 9107.
const DefaultPort = 9108

// MinKeyLen is the shortest pre-shared key accepted, in bytes.
const MinKeyLen = 32

// SyncVersion is the flow-sync protocol version this gateway speaks: the
// version byte of the handshake's greeting and reply. 1 since Egret 0.1.0.
const SyncVersion = 1

// oldestSync is the oldest protocol version still spoken: the previous
// minor release's (docs/operations.md, "Version skew").
const oldestSync = 1

// versions is the range of format versions one side speaks or reads.
type versions struct{ oldest, newest byte }

// syncVersions are the protocol versions this gateway speaks. The
// handshake settles on one: the listener greets with its newest, the
// client answers with the lower of that and its own newest, and each side
// refuses a version outside its range. Two gateways one minor release
// apart thus speak the older one's newest version.
var syncVersions = versions{oldestSync, SyncVersion}

const (
	nonceLen     = 32
	macLen       = sha256.Size
	maxNameLen   = 253
	maxFrame     = 1 << 20 // a sealed message, at most
	handshakeFor = 5 * time.Second
)

var magic = [4]byte{'E', 'G', 'S', 'Y'}

// ErrRefused means the other side does not hold the key.
var ErrRefused = errors.New("sync peer refused: it does not prove the pre-shared key")

// errMalformed means an authenticated message, or a state file, does not
// parse.
var errMalformed = errors.New("malformed")

// errNotSync means the other side sent something else than the flow sync's
// handshake.
var errNotSync = errors.New("not a flow sync peer")

// versionError is a peer or a file of a format version outside the range
// this gateway speaks or reads.
type versionError struct {
	format string // "flow sync protocol", "state file format"
	verb   string // what this gateway does with the format: "speaks", "reads"
	other  string // who made the version: "the peer", "the gateway that wrote it"
	got    byte
	here   versions
}

func (e *versionError) Error() string {
	here := fmt.Sprintf("version %d", e.here.newest)
	if e.here.oldest != e.here.newest {
		here = fmt.Sprintf("versions %d to %d", e.here.oldest, e.here.newest)
	}
	return fmt.Sprintf("%s version %d is not one this gateway %s (it %s %s): %s and this gateway are more than one minor release apart",
		e.format, e.got, e.verb, e.verb, here, e.other)
}

// syncVersionError is the refusal of a peer speaking protocol version got.
func syncVersionError(got byte, here versions) *versionError {
	return &versionError{format: "flow sync protocol", verb: "speaks", other: "the peer", got: got, here: here}
}

// kindOf names what a stream that starts with the four bytes b is, for the
// error that refuses it where another was expected.
func kindOf(b []byte) string {
	switch [4]byte(b) {
	case magic:
		return "a flow sync stream"
	case stateMagic, stateMagicV1:
		return "a flow state file"
	}
	return fmt.Sprintf("something else (its first bytes are % x)", b)
}

// LoadKey reads the pre-shared key from path (a Secret's key mounted as a
// file); surrounding white space is not part of it.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the flow sync key: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinKeyLen {
		return nil, fmt.Errorf("flow sync key %s has %d bytes; use at least %d random bytes (e.g. head -c 48 /dev/urandom | base64)", path, len(b), MinKeyLen)
	}
	return b, nil
}

func mac(key []byte, label string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// session is one authenticated, encrypted connection: each message is
// sealed with AES-256-GCM under a key of this session only (derived from
// the pre-shared key and both sides' fresh nonces), its nonce the message's
// number in its direction, so a message cannot be read, altered, replayed,
// reordered or carried into another session by a host without the key.
type session struct {
	c          net.Conn
	r          *bufio.Reader
	seal, open cipher.AEAD
	sent, recv uint64
	peer       string // the client's node name (server side)
	sealNonce  [12]byte
	openNonce  [12]byte
	hdr        [4]byte
	out        []byte
}

func newAEAD(key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key[:32])
	if err != nil {
		panic(err) // a 32-byte key always makes an AES-256 cipher
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err) // AES always has GCM
	}
	return g
}

func (s *session) keys(key, ns, nc []byte, client bool) {
	c2s, s2c := mac(key, "egret-sync/c2s", ns, nc), mac(key, "egret-sync/s2c", ns, nc)
	if client {
		s.seal, s.open = newAEAD(c2s), newAEAD(s2c)
	} else {
		s.seal, s.open = newAEAD(s2c), newAEAD(c2s)
	}
}

// clientHandshake proves the key to the server at c and has it proved back,
// naming this node, in a protocol version of vs that the server speaks.
func clientHandshake(c net.Conn, key []byte, node string, vs versions) (*session, error) {
	if len(node) > maxNameLen {
		return nil, fmt.Errorf("node name %q is longer than %d bytes", node, maxNameLen)
	}
	c.SetDeadline(time.Now().Add(handshakeFor))
	defer c.SetDeadline(time.Time{})
	s := &session{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	var hello [4 + 1 + nonceLen]byte
	if _, err := io.ReadFull(s.r, hello[:5]); err != nil {
		return nil, fmt.Errorf("read the sync peer's greeting: %w", err)
	}
	if [4]byte(hello[:4]) != magic {
		return nil, fmt.Errorf("%w: the listener sent %s", errNotSync, kindOf(hello[:4]))
	}
	if hello[4] < vs.oldest {
		return nil, syncVersionError(hello[4], vs)
	}
	v := min(hello[4], vs.newest)
	if _, err := io.ReadFull(s.r, hello[5:]); err != nil {
		return nil, fmt.Errorf("read the sync peer's greeting: %w", err)
	}
	ns := hello[5:]
	nc := make([]byte, nonceLen)
	rand.Read(nc)
	msg := append(append(append(append(magic[:], v), nc...), byte(len(node))), node...)
	msg = append(msg, mac(key, "egret-sync/client", ns, nc, []byte(node))...)
	if _, err := c.Write(msg); err != nil {
		return nil, fmt.Errorf("send the sync handshake: %w", err)
	}
	proof := make([]byte, macLen)
	if _, err := io.ReadFull(s.r, proof); err != nil {
		return nil, fmt.Errorf("%w (no proof: %v)", ErrRefused, err)
	}
	if !hmac.Equal(proof, mac(key, "egret-sync/server", ns, nc, []byte(node))) {
		return nil, ErrRefused
	}
	s.keys(key, ns, nc, true)
	return s, nil
}

// serverHandshake checks that the client at c holds the key and speaks a
// protocol version of vs, and proves the key back, all within d.
func serverHandshake(c net.Conn, key []byte, d time.Duration, vs versions) (*session, error) {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	s := &session{c: c, r: bufio.NewReaderSize(c, 64<<10)}
	ns := make([]byte, nonceLen)
	rand.Read(ns)
	if _, err := c.Write(append(append(magic[:], vs.newest), ns...)); err != nil {
		return nil, fmt.Errorf("send the sync greeting: %w", err)
	}
	var head [4 + 1 + nonceLen + 1]byte
	if _, err := io.ReadFull(s.r, head[:5]); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrRefused, err)
	}
	if [4]byte(head[:4]) != magic {
		return nil, fmt.Errorf("%w: the client sent %s", errNotSync, kindOf(head[:4]))
	}
	if head[4] < vs.oldest || head[4] > vs.newest {
		return nil, syncVersionError(head[4], vs)
	}
	if _, err := io.ReadFull(s.r, head[5:]); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrRefused, err)
	}
	nc := head[5 : 5+nonceLen]
	rest := make([]byte, int(head[len(head)-1])+macLen)
	if _, err := io.ReadFull(s.r, rest); err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrRefused, err)
	}
	name := rest[:len(rest)-macLen]
	if !hmac.Equal(rest[len(name):], mac(key, "egret-sync/client", ns, nc, name)) {
		return nil, ErrRefused
	}
	if _, err := c.Write(mac(key, "egret-sync/server", ns, nc, name)); err != nil {
		return nil, fmt.Errorf("send the sync proof: %w", err)
	}
	s.peer = string(name)
	s.keys(key, ns, nc, false)
	return s, nil
}

// nonce writes message number n into b (4 zero bytes, then n): each key
// seals each number once.
func nonce(b *[12]byte, n uint64) []byte {
	binary.BigEndian.PutUint64(b[4:], n)
	return b[:]
}

// write seals msg and sends it.
func (s *session) write(msg []byte) error {
	n := len(msg) + s.seal.Overhead()
	if n > maxFrame {
		return fmt.Errorf("sync message of %d bytes is over %d", n, maxFrame)
	}
	binary.BigEndian.PutUint32(s.hdr[:], uint32(n))
	s.out = append(s.out[:0], s.hdr[:]...)
	s.out = s.seal.Seal(s.out, nonce(&s.sealNonce, s.sent), msg, s.hdr[:])
	s.sent++
	_, err := s.c.Write(s.out)
	return err
}

// read returns the next message, opened, in buf's storage. A message that
// does not open (altered, replayed, out of order, another key) is
// ErrRefused; the connection is not usable after any error.
func (s *session) read(buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < s.open.Overhead() || n > maxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes", errMalformed, n)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(s.r, buf); err != nil {
		return nil, err
	}
	msg, err := s.open.Open(buf[:0], nonce(&s.openNonce, s.recv), buf, hdr[:])
	if err != nil {
		return nil, fmt.Errorf("%w: a message does not authenticate", ErrRefused)
	}
	s.recv++
	return msg, nil
}
