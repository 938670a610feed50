package flowsync

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/internal/nstest"
)

// The goldens of testdata/egret-0.1.0 are what Egret 0.1.0 wrote and sent
// (its README says how they were made): the formats of the previous
// release, which this one must read and speak.
const (
	golden010   = "testdata/egret-0.1.0/"
	goldenSeed  = 32 // crypto/rand's seed when the session was recorded
	goldenFlows = 20 // flow(i) for i below it; every third in CLOSE_WAIT
)

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(golden010 + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seedGoldenRandom seeds crypto/rand as it was when the goldens' session
// was recorded, so that the side that draws first draws the standby's
// nonce of sync-server.bin.
func seedGoldenRandom(t *testing.T) {
	t.Helper()
	cryptotest.SetGlobalRandom(t, goldenSeed)
	ns := make([]byte, nonceLen)
	rand.Read(ns)
	if !bytes.Equal(ns, readGolden(t, "sync-server.bin")[5:5+nonceLen]) {
		t.Fatalf("crypto/rand seeded with %d no longer draws the recorded nonces (Go changed its deterministic source?): record the goldens again as %sREADME.md says", goldenSeed, golden010)
	}
	cryptotest.SetGlobalRandom(t, goldenSeed)
}

// goldenTable is what the goldens hold, as table returns it.
func goldenTable() map[conntrack.Tuple]binding {
	m := map[conntrack.Tuple]binding{}
	for i := range goldenFlows {
		st := conntrack.StateEstablished
		if i%3 == 0 {
			st = conntrack.StateCloseWait
		}
		f := flow(i, st)
		m[f.Orig] = binding{f.NATAddr, f.NATPort, st}
	}
	return m
}

// restamp returns a copy of state file b as if written at at: its time
// rewritten and, from version 2 on, its checksum.
func restamp(t testing.TB, b []byte, at time.Time) []byte {
	t.Helper()
	b = bytes.Clone(b)
	switch [4]byte(b) {
	case stateMagicV1:
		binary.BigEndian.PutUint64(b[4:], uint64(at.UnixNano()))
	case stateMagic:
		binary.BigEndian.PutUint64(b[5:], uint64(at.UnixNano()))
		reseal(b)
	default:
		t.Fatalf("restamp: not a state file: % x", b[:4])
	}
	return b
}

// reseal rewrites the checksum of version 2 state file b.
func reseal(b []byte) {
	body := b[:len(b)-stateSumLen]
	binary.BigEndian.PutUint32(b[len(body):], crc32.Checksum(body, castagnoli))
}

// TestStateFileOfPreviousRelease: a state file Egret 0.1.0 left (version 1,
// no version byte) is read by this release, every flow with its binding
// and state; as old as 0.1.0 wrote it, it is refused as stale, not as
// another format.
func TestStateFileOfPreviousRelease(t *testing.T) {
	v1 := readGolden(t, "flows.state")
	path := filepath.Join(t.TempDir(), "flows.state")

	os.WriteFile(path, v1, 0o600)
	var se *StateError
	if _, _, err := LoadState(path, newPipeline(t, 1<<12), clock()); !errors.As(err, &se) || se.Reason != StateRefusedStale {
		t.Fatalf("0.1.0's file as written long ago: %v; want it refused as stale", err)
	}

	os.WriteFile(path, restamp(t, v1, time.Now()), 0o600)
	p := newPipeline(t, 1<<12, egress, egress6)
	n, failed, err := LoadState(path, p, clock())
	if err != nil || n != goldenFlows || failed != 0 {
		t.Fatalf("0.1.0's state file: %d adopted, %d failed, %v; want %d adopted", n, failed, err, goldenFlows)
	}
	if !equal(table(p, egress, egress6), goldenTable()) {
		t.Fatalf("resumed %v, want 0.1.0's flows %v", table(p, egress, egress6), goldenTable())
	}
}

// TestStateFileCarriesItsVersion: what WriteState writes names its format
// version, and a version this gateway does not read is refused, counted as
// such, with both versions in the error.
func TestStateFileCarriesItsVersion(t *testing.T) {
	raw := writeState(t, 3)
	if [4]byte(raw) != stateMagic || raw[4] != StateVersion {
		t.Fatalf("the state file starts % x; want the magic %q and version %d", raw[:5], stateMagic[:], StateVersion)
	}
	next := bytes.Clone(raw)
	next[4] = StateVersion + 1
	reseal(next)
	err := loadRefused(t, next, StateRefusedVersion)
	for _, want := range []string{"state file format version 3", "reads versions 1 to 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}

// TestStateFileRefusals: a state file cut short anywhere, altered,
// garbage, too old, or another Egret format (the flow sync's bytes) is
// refused with the reason counted, never a panic, and nothing of it is
// adopted: the gateway starts fresh. Version 1 files cut inside a record
// are refused too (cut between records they cannot be told from whole).
func TestStateFileRefusals(t *testing.T) {
	raw := writeState(t, 3)
	for cut := range len(raw) {
		loadRefused(t, raw[:cut], StateRefusedMalformed)
	}
	for i := 0; i < len(raw); i += 7 {
		if i == 4 {
			continue // the version: refused as another one (above)
		}
		bad := bytes.Clone(raw)
		bad[i] ^= 0x10
		loadRefused(t, bad, StateRefusedMalformed)
	}
	v1 := restamp(t, readGolden(t, "flows.state"), time.Now())
	for _, cut := range []int{3, 11, 40, len(v1) - 5} {
		loadRefused(t, v1[:cut], StateRefusedMalformed)
	}
	rnd := mrand.New(mrand.NewPCG(1, 2))
	for range 100 {
		junk := make([]byte, rnd.IntN(200))
		for i := range junk {
			junk[i] = byte(rnd.Uint32())
		}
		loadRefused(t, junk, StateRefusedMalformed)
	}
	if err := loadRefused(t, readGolden(t, "sync-client.bin"), StateRefusedMalformed); !strings.Contains(err.Error(), "flow sync stream") {
		t.Errorf("the flow sync's bytes as a state file: %q; want it to say what they are", err)
	}
	loadRefused(t, restamp(t, raw, time.Now().Add(-MaxStateAge-time.Minute)), StateRefusedStale)

	dir := filepath.Join(t.TempDir(), "flows.state")
	os.Mkdir(dir, 0o700)
	if _, _, err := LoadState(dir, newPipeline(t, 1<<12), clock()); !isRefusal(err, StateRefusedUnreadable) {
		t.Fatalf("a state file that cannot be read: %v; want it refused as unreadable", err)
	}
}

// writeState writes n flows to a state file and returns its bytes.
func writeState(t *testing.T, n int) []byte {
	t.Helper()
	p := newPipeline(t, 1<<12, egress, egress6)
	for i := range n {
		adopt(t, p, flow(i, conntrack.StateEstablished))
	}
	path := filepath.Join(t.TempDir(), "flows.state")
	if _, err := WriteState(path, p, clock()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadRefused loads b as a state file and fails unless it is refused for
// reason with nothing adopted and the file removed; it returns the error.
func loadRefused(t *testing.T, b []byte, reason StateRefusal) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.state")
	os.WriteFile(path, b, 0o600)
	p := newPipeline(t, 1<<12, egress, egress6)
	n, failed, err := LoadState(path, p, clock())
	if !isRefusal(err, reason) || n != 0 || failed != 0 || len(table(p, egress, egress6)) != 0 {
		t.Fatalf("state file of %d bytes starting % x: %d adopted, %d failed, %v; want it refused as %s with nothing adopted",
			len(b), b[:min(len(b), 5)], n, failed, err, reason)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused state file was left to be read again: %v", err)
	}
	return err
}

func isRefusal(err error, reason StateRefusal) bool {
	var se *StateError
	return errors.As(err, &se) && se.Reason == reason
}

// FuzzStateFile: whatever a state file holds, parsing it returns an error
// or items that all parse, never a panic.
func FuzzStateFile(f *testing.F) {
	f.Add(readGolden(f, "flows.state"))
	f.Add(readGolden(f, "sync-client.bin"))
	f.Add([]byte("EGST\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		items, _, err := parseState(b)
		if err != nil {
			return
		}
		var it item
		for len(items) > 0 {
			if items, err = next(items, &it); err != nil {
				t.Fatalf("parseState accepted an item next refuses: %v", err)
			}
		}
	})
}

// TestSyncReceivesFromPreviousRelease replays the session Egret 0.1.0's
// primary opened to its standby: this release's standby answers it byte for
// byte as 0.1.0's did (greeting, proof, acknowledgements) and holds its
// flows.
func TestSyncReceivesFromPreviousRelease(t *testing.T) {
	client, server := readGolden(t, "sync-client.bin"), readGolden(t, "sync-server.bin")
	b := newPipeline(t, 1<<12)
	// The standby's nonce is 0.1.0's. Seeded before the standby starts,
	// whose goroutines then see the seeded source, and stops first.
	seedGoldenRandom(t)
	sb, addr := standby(t, b)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(syncWait))
	go c.Write(client)
	got := make([]byte, len(server))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("the standby answered %d bytes of 0.1.0's %d: %v (stats %+v)", len(got), len(server), err, sb.Stats())
	}
	if !bytes.Equal(got, server) {
		t.Fatalf("the standby answered 0.1.0's primary with\n% x\nwhere 0.1.0's standby answered\n% x", got, server)
	}
	nstest.Eventually(t, "the standby holds 0.1.0's flows", syncWait, func() bool { return equal(table(b, egress, egress6), goldenTable()) })
	if st := sb.Stats(); st.Refused+st.Malformed+st.VersionRefused != 0 {
		t.Fatalf("standby stats %+v: want nothing refused", st)
	}
}

// TestSyncSendsToPreviousRelease: this release's primary, greeted as Egret
// 0.1.0's standby greeted, answers byte for byte as 0.1.0's primary did,
// accepts that standby's proof, and sends its flows in batches the
// standby's session opens and parses.
func TestSyncSendsToPreviousRelease(t *testing.T) {
	client, server := readGolden(t, "sync-client.bin"), readGolden(t, "sync-server.bin")
	const greetLen, replyLen = 4 + 1 + nonceLen, 4 + 1 + nonceLen + 1 + len("primary") + macLen
	a := newPipeline(t, 1<<12, egress, egress6)
	for i := range goldenFlows {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// 0.1.0's standby drew the first nonce, its primary the second. Seeded
	// before the primary starts, which then sees the seeded source, and
	// stops first.
	seedGoldenRandom(t)
	ns := make([]byte, nonceLen)
	rand.Read(ns)
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(peers(ln.Addr().String()))
	sa.Start()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(syncWait))
	if _, err := c.Write(server[:greetLen]); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, replyLen)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(reply, client[:replyLen]) {
		t.Fatalf("the primary answered 0.1.0's greeting with\n% x\nwhere 0.1.0's primary answered\n% x", reply, client[:replyLen])
	}
	if _, err := c.Write(server[greetLen : greetLen+macLen]); err != nil {
		t.Fatal(err)
	}
	s := &session{c: c, r: bufio.NewReader(c)}
	s.keys(testKey, ns, reply[5:5+nonceLen], false)
	upserts := 0
	for upserts < goldenFlows {
		msg, err := s.read(nil)
		if err != nil {
			t.Fatalf("after %d flows: %v", upserts, err)
		}
		typ, _, body, err := header(msg)
		if err != nil || typ != msgBatch {
			t.Fatalf("message type %d, %v; want a batch", typ, err)
		}
		var it item
		for len(body) > 0 {
			if body, err = next(body, &it); err != nil {
				t.Fatal(err)
			}
			if it.kind == itemUpsert {
				upserts++
			}
		}
	}
	if st := sa.Stats(); st.ConnectFail+st.VersionRefused != 0 {
		t.Fatalf("primary stats %+v: want no failed or refused session", st)
	}
}

// TestSyncVersionHandshake: two sides settle on the newest version both
// speak, the client taking the lower of the listener's newest and its own,
// so a release and the next one (which speaks both their versions) talk;
// sides with no version in common are refused on the side that finds it
// out, with both versions in the error.
func TestSyncVersionHandshake(t *testing.T) {
	for _, tc := range []struct {
		name           string
		server, client versions
		want           byte   // the version the client answers with
		refused        string // "server", "client" or ""
		msg            string // in the refusal
	}{
		{"same release", syncVersions, syncVersions, SyncVersion, "", ""},
		{"next release listens", versions{1, 2}, versions{1, 1}, 1, "", ""},
		{"next release dials", versions{1, 1}, versions{1, 2}, 1, "", ""},
		{"both next release", versions{1, 2}, versions{1, 2}, 2, "", ""},
		{"two releases on listens", versions{2, 3}, versions{1, 1}, 1, "server", "flow sync protocol version 1 is not one this gateway speaks (it speaks versions 2 to 3)"},
		{"two releases on dials", versions{1, 1}, versions{2, 3}, 0, "client", "flow sync protocol version 1 is not one this gateway speaks (it speaks versions 2 to 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, cc := net.Pipe()
			defer sc.Close()
			rec := &recordConn{Conn: cc}
			serr := make(chan error, 1)
			go func() {
				_, err := serverHandshake(sc, testKey, time.Second, tc.server)
				sc.Close()
				serr <- err
			}()
			_, cerr := clientHandshake(rec, testKey, "primary", tc.client)
			cc.Close()
			err := <-serr
			var ve *versionError
			switch tc.refused {
			case "":
				if err != nil || cerr != nil {
					t.Fatalf("server: %v, client: %v; want a session", err, cerr)
				}
			case "server":
				if !errors.As(err, &ve) || cerr == nil {
					t.Fatalf("server: %v, client: %v; want the server to refuse the version", err, cerr)
				}
			case "client":
				if !errors.As(cerr, &ve) {
					t.Fatalf("client: %v; want it to refuse the version", cerr)
				}
				err = cerr
			}
			if tc.refused != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("refusal %q; want it to say %q", err, tc.msg)
			}
			if tc.refused != "client" && (rec.out.Len() < 5 || rec.out.Bytes()[4] != tc.want) {
				t.Fatalf("the client answered % x; want version %d", rec.out.Bytes()[:min(rec.out.Len(), 5)], tc.want)
			}
		})
	}
}

// recordConn keeps what is written to it.
type recordConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *recordConn) Write(b []byte) (int, error) {
	c.out.Write(b)
	return c.Conn.Write(b)
}

// TestSyncVersionRefusalsCounted: a real standby refuses a client of
// another protocol version and a real primary a standby of one, each
// counting it (egret_gateway_sync_version_refused_total) apart from the
// key refusals; no session is opened.
func TestSyncVersionRefusalsCounted(t *testing.T) {
	b := newPipeline(t, 1<<12)
	sb, addr := standby(t, b)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(append(append(magic[:], SyncVersion+7), make([]byte, nonceLen+1)...))
	nstest.Eventually(t, "the standby counts the refusal", syncWait, func() bool { return sb.Stats().VersionRefused == 1 })
	c.Close()
	if st := sb.Stats(); st.Refused != 0 {
		t.Fatalf("standby stats %+v: a version refusal counted as a key refusal", st)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write(append(append(magic[:], oldestSync-1), make([]byte, nonceLen)...))
			c.Close()
		}
	}()
	sa := newSync(t, "primary", testKey, newPipeline(t, 1<<12, egress), nil)
	sa.SetPeers(peers(ln.Addr().String()))
	sa.Start()
	nstest.Eventually(t, "the primary counts the refusal", syncWait, func() bool { return sa.Stats().VersionRefused >= 1 })
	if st := sa.Stats(); st.ConnectFail < st.VersionRefused || st.FullResyncs != 0 {
		t.Fatalf("primary stats %+v: want each refusal a failed connection, and no session", st)
	}
}

// TestSyncRefusesStateFile: the flow sync never takes a state file for
// its handshake, on either side, and says what it was given.
func TestSyncRefusesStateFile(t *testing.T) {
	for _, state := range [][]byte{readGolden(t, "flows.state"), writeState(t, 2)} {
		sc, cc := net.Pipe()
		go func() { cc.Write(state); cc.Close() }()
		go io.Copy(io.Discard, cc)
		_, err := serverHandshake(sc, testKey, time.Second, syncVersions)
		sc.Close()
		if !errors.Is(err, errNotSync) || !strings.Contains(err.Error(), "flow state file") {
			t.Fatalf("a state file sent to the listener: %v; want it refused as a state file", err)
		}

		lc, dc := net.Pipe()
		go func() { lc.Write(state); lc.Close() }()
		_, err = clientHandshake(dc, testKey, "primary", syncVersions)
		dc.Close()
		if !errors.Is(err, errNotSync) || !strings.Contains(err.Error(), "flow state file") {
			t.Fatalf("a state file as the listener's greeting: %v; want it refused as a state file", err)
		}
	}
}
