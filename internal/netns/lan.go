package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// LAN is a private network of hosts for tests: one network namespace per
// host, each with an interface eth0 whose veth peer is attached to one
// bridge. The bridge has no address and nothing is forwarded, so traffic
// stays between the hosts. Everything is removed when the test ends, passed
// or failed; names carry a random suffix so that runs never collide.
type LAN struct {
	Hosts  []Host
	bridge string
}

// Host is one namespace on a LAN.
type Host struct {
	NS        string // network namespace name
	IP        string // address of eth0
	Interface string // "eth0"
}

// NewLAN builds a LAN of n hosts, or skips the test where that needs
// privileges this process lacks.
func NewLAN(t *testing.T, n int) *LAN {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: building a test LAN of network namespaces needs root; run `make test` as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: the ip command (iproute2) is not installed; .ci/run installs it")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	lan := &LAN{bridge: "mcbr" + id}
	t.Cleanup(lan.remove)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("link", "add", lan.bridge, "type", "bridge", "mcast_snooping", "0")
	run("link", "set", lan.bridge, "up")
	for i := 0; i < n; i++ {
		h := Host{NS: fmt.Sprintf("mcn%s-%d", id, i), IP: fmt.Sprintf("10.77.0.%d", i+1), Interface: "eth0"}
		lan.Hosts = append(lan.Hosts, h)
		veth := fmt.Sprintf("mv%s-%d", id, i)
		run("netns", "add", h.NS)
		run("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		run("link", "set", veth, "master", lan.bridge, "up")
		run("-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
		run("-n", h.NS, "link", "set", "eth0", "up")
		run("-n", h.NS, "link", "set", "lo", "up")
	}
	return lan
}

// Command returns a command that runs in the host's namespace.
func (h Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// remove deletes the namespaces (their veth pairs go with them) and the
// bridge.
func (l *LAN) remove() {
	for _, h := range l.Hosts {
		_ = exec.Command("ip", "netns", "del", h.NS).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
}
