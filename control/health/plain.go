package health

import (
	"bufio"
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// AlsoPlain makes a TLS server (TLS) accept plain gRPC as well, for the
// time of an upgrade: a controller of the previous release probes in plain
// text, and a gateway that refused it would look down to it, so it would
// move every egress IP off the gateways already upgraded. A connection is
// told apart by its first byte (a TLS record starts with 0x16, the HTTP/2
// preface with 'P'). A plain connection is not authenticated: its lease is
// a Grant with Authenticated false, which --controller-lease=tls refuses,
// and the controller of this release trusts only TLS answers from a node
// that holds a certificate.
func AlsoPlain() Option { return func(o *options) { o.alsoPlain = true } }

// tlsRecordHandshake is the first byte of a TLS client's first record.
const tlsRecordHandshake = 0x16

// tlsOrPlain is TLS credentials that let plain connections through, with no
// security, on the server side.
type tlsOrPlain struct {
	credentials.TransportCredentials // the TLS ones
}

// plainInfo is the AuthInfo of a plain connection.
type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

// peekedConn is a connection whose first bytes were read ahead into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c tlsOrPlain) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// The server's connection timeout (HandshakeTimeout) is the raw
	// connection's deadline already: a client that sends nothing waits
	// here at most that long.
	pc := &peekedConn{Conn: raw, r: bufio.NewReader(raw)}
	first, err := pc.r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if first[0] == tlsRecordHandshake {
		return c.TransportCredentials.ServerHandshake(pc)
	}
	return pc, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (c tlsOrPlain) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, raw)
}

func (c tlsOrPlain) Clone() credentials.TransportCredentials {
	return tlsOrPlain{c.TransportCredentials.Clone()}
}
