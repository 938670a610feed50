package steer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// sysctlChildEnv makes the test binary run the kernel setup (setupChild)
// instead of the tests: it is started inside a private mount namespace
// whose /proc/sys is read-only, as in a container that is not privileged.
const sysctlChildEnv = "EGRET_STEER_SETUP_CHILD"

func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(sysctlChildEnv); ok {
		if err := setupChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// setupChild runs what the agent runs at start: NewKernel and Setup, with
// procSysNet set to dir.
func setupChild(dir string) error {
	cfg := Config{Underlay: "eth0", ClusterCIDRs: []string{"198.18.0.0/16"}, ServiceCIDRs: []string{"198.19.0.0/16"},
		ProcSysNet: dir}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	k, err := NewKernel(cfg, netns.None(), nil)
	if err != nil {
		return err
	}
	defer k.Close()
	return k.Setup()
}

// shippedProcSysNet reads deploy/steer/daemonset.yaml and returns where it
// mounts the node's /proc/sys/net and the --proc-sys-net it passes; the
// two must agree.
func shippedProcSysNet(t *testing.T) (mountPath, flag string) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/steer/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	vol := ""
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/proc/sys/net" {
			vol = v.Name
		}
	}
	c := ds.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		if m.Name == vol && vol != "" {
			if m.ReadOnly {
				t.Fatalf("the DaemonSet mounts the node's /proc/sys/net read-only at %s", m.MountPath)
			}
			mountPath = m.MountPath
		}
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--proc-sys-net="); ok {
			flag = v
		}
	}
	if mountPath == "" || flag != mountPath {
		t.Fatalf("deploy/steer/daemonset.yaml: host path /proc/sys/net mounted at %q, --proc-sys-net=%q: they must agree", mountPath, flag)
	}
	return mountPath, flag
}

// TestSysctlShippedMount runs the agent's kernel setup in a node namespace
// whose /proc/sys is read-only (a private mount namespace, bound read-only
// as container runtimes do): with the shipped DaemonSet's mount of the
// node's /proc/sys/net and its --proc-sys-net the multipath hash policy is
// set in that node's namespace; without them setup fails saying what to mount.
func TestSysctlShippedMount(t *testing.T) {
	requirePrivileged(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs unshare (util-linux; CI=true: install it)")
		}
		t.Skip("needs unshare (util-linux)")
	}
	mountPath, flag := shippedProcSysNet(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()

	run := func(t *testing.T, withMount bool) (string, string, error) {
		node, _ := newNS(t, "sysctl")
		ipb(t, node, "link add eth0 type veth peer name eth1", "addr add 192.0.2.11/24 dev eth0", "link set eth0 up", "link set eth1 up")
		dir := "/proc/sys/net"
		script := ""
		if withMount {
			// The hostPath volume: the node's /proc/sys/net, bound before
			// /proc/sys turns read-only, at the DaemonSet's mount path.
			dir = filepath.Join(root, flag)
			script = fmt.Sprintf("mkdir -p %[1]s && mount --bind /proc/sys/net %[1]s && ", filepath.Join(root, mountPath))
		}
		script += "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && " +
			"! sh -c 'echo 1 > /proc/sys/net/ipv4/fib_multipath_hash_policy' 2>/dev/null && exec \"$0\""
		cmd := exec.Command("ip", "netns", "exec", node, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, exe)
		cmd.Env = append(os.Environ(), sysctlChildEnv+"="+dir)
		out, err := cmd.CombinedOutput()
		got := strings.TrimSpace(sh(t, "ip", "netns", "exec", node, "cat", "/proc/sys/net/ipv4/fib_multipath_hash_policy"))
		fields := strings.TrimSpace(sh(t, "ip", "netns", "exec", node, "cat", "/proc/sys/net/ipv4/fib_multipath_hash_fields"))
		return string(out), got + " " + fields, err
	}

	t.Run("shipped mount", func(t *testing.T) {
		out, got, err := run(t, true)
		if err != nil {
			t.Fatalf("kernel setup with the DaemonSet's mount failed: %v\n%s", err, out)
		}
		if got != "3 55" {
			t.Fatalf("net.ipv4.fib_multipath_hash_policy and _fields in the node namespace = %s, want 3 (custom) and 55 (0x37: addresses, protocol, ports)", got)
		}
	})
	t.Run("without the mount", func(t *testing.T) {
		out, got, err := run(t, false)
		if err == nil {
			t.Fatalf("kernel setup under a read-only /proc/sys succeeded; want a clear error\n%s", out)
		}
		for _, want := range []string{"read-only", "procSysNet", "/proc/sys/net"} {
			if !strings.Contains(out, want) {
				t.Errorf("error does not mention %q:\n%s", want, out)
			}
		}
		if got != "0 7" {
			t.Fatalf("net.ipv4.fib_multipath_hash_policy and _fields = %s after a failed setup, want the netns defaults 0 and 7", got)
		}
	})
}
