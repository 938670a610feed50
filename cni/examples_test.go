package cni

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDeployExamples keeps deploy/cni honest: every NetworkAttachmentDefinition's
// config must pass validation, and its ipConfig must resolve against the ConfigMap
// shipped next to it.
func TestDeployExamples(t *testing.T) {
	files, err := filepath.Glob("../deploy/cni/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/cni manifests: %v", err)
	}
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct{ Name, Namespace string }
		Spec     struct{ Config string }
		Data     map[string]string `json:"data"`
	}
	cms := fakeCMs{}
	var configs []*Config
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch o.Kind {
			case "NetworkAttachmentDefinition":
				c, err := ParseConfig([]byte(o.Spec.Config))
				if err != nil {
					t.Errorf("%s: %s: %v", f, o.Metadata.Name, err)
					continue
				}
				configs = append(configs, c)
			case "ConfigMap":
				cms[o.Metadata.Namespace+"/"+o.Metadata.Name] = o.Data
			}
		}
	}
	if len(configs) < 2 {
		t.Fatalf("found %d NetworkAttachmentDefinitions", len(configs))
	}
	for _, c := range configs {
		for _, pod := range []string{"db-router", "metrics-7"} {
			if c.IPConfig == nil && pod != "db-router" {
				continue
			}
			if _, err := ResolveIP(context.Background(), c, PodArgs{Name: pod, Namespace: "egress-demo"}, cms); err != nil {
				t.Errorf("%s for pod %s: %v", c.Raw.Name, pod, err)
			}
		}
	}
}

// TestDocExamples checks every ```json block of docs/egress-router.md is a valid config
// (or valid node-side settings).
func TestDocExamples(t *testing.T) {
	b, err := os.ReadFile("../docs/egress-router.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d json examples", len(blocks))
	}
	for _, m := range blocks {
		if strings.Contains(m[1], `"Statement"`) { // aws-elastic-ip's IAM policy
			var policy struct{ Statement []struct{ Action []string } }
			if err := json.Unmarshal([]byte(m[1]), &policy); err != nil {
				t.Errorf("the IAM policy is not JSON: %v\n%s", err, m[1])
				continue
			}
			var actions []string
			for _, st := range policy.Statement {
				actions = append(actions, st.Action...)
			}
			slices.Sort(actions)
			if want := slices.Sorted(slices.Values(eipActions)); !slices.Equal(actions, want) {
				t.Errorf("the IAM policy allows %v; the plugin calls %v", actions, want)
			}
			continue
		}
		if strings.Contains(m[1], "allowMasterTypes") { // the node-side settings file
			if _, err := ParseHostConfig([]byte(m[1])); err != nil {
				t.Errorf("doc example of the host settings does not validate: %v\n%s", err, m[1])
			}
			continue
		}
		if _, err := ParseConfig([]byte(m[1])); err != nil {
			t.Errorf("doc example does not validate: %v\n%s", err, m[1])
		}
	}
}

// eipActions are the EC2 calls aws-elastic-ip makes, as docs/egress-router.md's
// IAM policy lists them (TestDocExamples); TestEIPAttachCheckRelease checks
// the plugin calls no other.
var eipActions = []string{
	"ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
	"ec2:AssociateAddress", "ec2:DisassociateAddress",
	"ec2:DescribeAddresses", "ec2:DescribeNetworkInterfaces",
}
