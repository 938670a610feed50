package cni

// The two example configurations of spec/egress-router-cni.txt, character for
// character (tabs included): no cniVersion, and the second with its JSON mistakes.
const (
	specExample1 = `{
	"name": "egress-router-1",
	"type": "egress-router",

	"ip": {
		"addresses": ["192.168.1.99/24"]
	}
}`
	specExample2 = `{
	"name": "egress-router-2",
	"type": "egress-router",

	"interfaceType": "ipvlan",
	"interfaceArgs": {
		"master": "eth1",
	},
	"podIP": {
		"db-router": {
			"addresses": ["192.168.3.10/24"],
			"gateway": "192.168.3.1",
			"destinations": ["10.1.2.3/32"]
		},
		"metrics-router": {
			"addresses": ["192.168.3.11/24"]
			"gateway": "192.168.3.1",
		},
		"alpha-*": {
			"addresses": ["192.168.3.12/24"]
			"gateway": "192.168.3.1",
		}
	}
}`
)

// specExample2Fixed is specExample2 with only its JSON punctuation corrected: the
// comma after "eth1" removed, the commas after the addresses lists added and the
// ones after the last gateways removed.
const specExample2Fixed = `{
	"name": "egress-router-2",
	"type": "egress-router",

	"interfaceType": "ipvlan",
	"interfaceArgs": {
		"master": "eth1"
	},
	"podIP": {
		"db-router": {
			"addresses": ["192.168.3.10/24"],
			"gateway": "192.168.3.1",
			"destinations": ["10.1.2.3/32"]
		},
		"metrics-router": {
			"addresses": ["192.168.3.11/24"],
			"gateway": "192.168.3.1"
		},
		"alpha-*": {
			"addresses": ["192.168.3.12/24"],
			"gateway": "192.168.3.1"
		}
	}
}`
