package gateway

import (
	"testing"
)

// FuzzPipeline feeds arbitrary frames to a configured worker with live flows.
// Besides never panicking, whatever it sends must make sense: towards the
// outside an IP packet from a hosted egress IP, towards a node a tunnel
// packet from our VTEP to that node's VTEP carrying a packet to one of its
// pods (or the pod's ICMP error from the router address).
func FuzzPipeline(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	fx := newFixture(f, 1<<12, testConfig())
	hot := hotFrames(f, fx)
	for _, fr := range hot {
		f.Add(fr)
	}
	// Fragments, both directions and families, with their first fragments
	// already through so that mutated later ones meet live entries.
	for _, v6 := range []bool{false, true} {
		o1, o2, i1, i2 := fragFrames(f, fx, v6)
		for _, fr := range [][]byte{o1, o2, i1, i2} {
			f.Add(fr)
		}
	}
	out := make([]byte, 2048)
	var check Parsed
	snap := fx.p.Snapshot()
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		r := processOne(fx.w, testNow, in, out)
		if string(in) != string(b) {
			t.Fatal("the input frame was modified")
		}
		switch r.Verdict {
		case VerdictDrop:
			if r.Reason == DropNone || r.Reason >= numDropReasons {
				t.Fatalf("drop without a valid reason: %d", r.Reason)
			}
			return
		case VerdictPass:
			return
		case VerdictTx:
		default:
			t.Fatalf("verdict %d", r.Verdict)
		}
		if r.Len <= 0 || r.Len > len(out) {
			t.Fatalf("output length %d", r.Len)
		}
		check.Decode(out[:r.Len])
		switch r.Ifindex {
		case outHop.Ifindex:
			if check.Kind != KindIP || !snap.hosted.has(&check.Src) {
				t.Fatalf("sent outside a frame that is not from an egress IP: %+v", check)
			}
		case underlayHop.Ifindex:
			if check.Kind != KindTunnel {
				t.Fatalf("sent to a node a frame that is not a tunnel packet: kind %v bad %v", check.Kind, check.Bad)
			}
			ni, ok := snap.nodeByVTEP.get(&check.OuterDst)
			if !ok {
				t.Fatal("tunnel packet to an unknown VTEP")
			}
			pod, ok := snap.pods.get(&check.Dst)
			if !ok || pod.node != *ni {
				t.Fatal("tunnel packet to an address that is not a pod of that node")
			}
		default:
			t.Fatalf("sent out of unknown interface %d", r.Ifindex)
		}
	})
}
