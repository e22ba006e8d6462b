package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// LAN is a private network of hosts for tests: one network namespace per
// host, each with an interface eth0 whose veth peer is attached to one
// bridge. The bridge has no address and nothing is forwarded, so traffic
// stays between the hosts. Everything is removed when the test ends, passed
// or failed; names carry a random suffix so that runs never collide. A test
// process killed outright (SIGKILL, or go test's -timeout) cannot clean up:
// its LAN is removed by the next NewLAN on the host, which finds it by the
// creator its bridge names, and the processes the LAN ran die with their
// creator.
//
// Partition splits the hosts onto several bridges, and Heal puts them back
// on one; Impair makes one host's link lossy or one-way. Call them from the
// test's own goroutine, like t.Fatal.
type LAN struct {
	Hosts    []Host
	id       string       // the random suffix of every name the LAN made
	bridge   string       // the original bridge: side 0
	extra    []string     // bridges made by Partition; removed with the LAN
	on       []string     // the bridge each host's veth is attached to now
	impaired []Impairment // what Impair does to each host now
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
	sweepOrphans(t)
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	lan := &LAN{id: id, bridge: bridgePrefix + id}
	t.Cleanup(lan.remove)
	run := func(args ...string) {
		t.Helper()
		ipCmd(t, args...)
	}
	creator, err := processToken(os.Getpid())
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	// The alias names the creator as soon as the bridge exists (ip cannot
	// set it in the same request): a LAN whose creator is killed half-way
	// through NewLAN is still found and removed, unless it was killed
	// between the two.
	run("link", "add", lan.bridge, "type", "bridge", "mcast_snooping", "0")
	run("link", "set", "dev", lan.bridge, "alias", aliasPrefix+creator)
	noIPv6(t, lan.bridge)
	run("link", "set", lan.bridge, "up")
	for i := 0; i < n; i++ {
		h := Host{NS: fmt.Sprintf("%s%s-%d", hostPrefix, id, i), IP: fmt.Sprintf("10.77.0.%d", i+1), Interface: "eth0"}
		lan.Hosts = append(lan.Hosts, h)
		veth := lan.veth(i)
		run("netns", "add", h.NS)
		run("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		noIPv6(t, veth)
		run("link", "set", veth, "master", lan.bridge, "up")
		lan.on = append(lan.on, lan.bridge)
		lan.impaired = append(lan.impaired, Impairment{})
		run("-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
		run("-n", h.NS, "link", "set", "eth0", "up")
		run("-n", h.NS, "link", "set", "lo", "up")
	}
	return lan
}

// Command returns a command that runs in the host's namespace. It is killed
// when the process that starts it dies, however it dies: a daemon left
// running in a LAN whose test was killed would hold the namespace.
func (h Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	// ip netns exec execs the command in the same process, which keeps the
	// parent-death signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Partition splits the LAN: hosts listed in different sides can no longer
// exchange any packet, unicast or multicast, while hosts on the same side
// still can. Hosts listed in no side stay together on the original bridge.
// Each call starts from scratch: a host it does not list goes back to the
// original bridge, wherever an earlier call put it. Side k (counting from 1)
// is a bridge of its own, made the first time a host goes there and kept
// until the LAN is removed; like the original it has no address, no
// multicast snooping and no route to anywhere. Hosts are moved by attaching
// their veth to another bridge: packets already in flight may still arrive,
// nothing sent afterwards crosses.
func (l *LAN) Partition(t *testing.T, sides ...[]int) {
	t.Helper()
	side, err := plan(len(l.Hosts), sides)
	if err != nil {
		t.Fatalf("netns: Partition: %v", err)
	}
	for i, k := range side {
		to := l.bridge
		if k > 0 {
			to = fmt.Sprintf("%sp%d", l.bridge, k)
			if !slices.Contains(l.extra, to) {
				ipCmd(t, "link", "add", to, "type", "bridge", "mcast_snooping", "0")
				l.extra = append(l.extra, to) // only once made: never remove a bridge the LAN did not make
				noIPv6(t, to)
				ipCmd(t, "link", "set", to, "up")
			}
		}
		if l.on[i] == to {
			continue
		}
		// One request: the kernel detaches the veth from its bridge and
		// attaches it to the other under one lock, so the port is never
		// outside a bridge in between (as it would be between "nomaster"
		// and "master").
		ipCmd(t, "link", "set", l.veth(i), "master", to)
		l.on[i] = to
	}
}

// Heal puts every host back on the original bridge.
func (l *LAN) Heal(t *testing.T) {
	t.Helper()
	l.Partition(t)
}

// SetLink takes host i's eth0 down, as an unplugged cable would, or brings
// it up again. Its address stays; while it is down, sends through it fail and
// nothing arrives.
func (l *LAN) SetLink(t *testing.T, i int, up bool) {
	t.Helper()
	if i < 0 || i >= len(l.Hosts) {
		t.Fatalf("netns: SetLink: host %d; the LAN has hosts 0 to %d", i, len(l.Hosts)-1)
	}
	state := map[bool]string{true: "up", false: "down"}[up]
	ipCmd(t, "-n", l.Hosts[i].NS, "link", "set", l.Hosts[i].Interface, state)
}

// Impairment is what Impair does to one host's link to the LAN: the share
// of its IPv4 packets lost at random in each direction, in percent (0 to
// 100). ARP is spared, so that a link heals as soon as the impairment ends.
type Impairment struct {
	// In is the share of the packets arriving from the other hosts that the
	// host loses; at 100 it hears nothing.
	In int
	// Out is the share of the host's packets that each other host loses,
	// drawn for each receiver, so a multicast may reach some and not others;
	// at 100 nobody hears the host.
	Out int
}

// ImpairUnavailable says why Impair cannot work here (its nft command, from
// Debian's nftables, is missing), or returns nil.
func ImpairUnavailable() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("the nft command (Debian package nftables) is not installed; .ci/run installs it")
	}
	return nil
}

// Impair sets host i's impairment, replacing the one it had: Impairment{}
// ends it. Packets are dropped where they arrive, by an nftables rule on the
// ingress of each receiving host's eth0 (in its own namespace, so it goes
// with the namespace): an ingress drop is silent, as a lossy link is, where
// one on the sender's output would fail its send. Partition and Impair work
// together: a split cuts whatever Impair leaves.
func (l *LAN) Impair(t *testing.T, i int, imp Impairment) {
	t.Helper()
	if i < 0 || i >= len(l.Hosts) {
		t.Fatalf("netns: Impair: host %d; the LAN has hosts 0 to %d", i, len(l.Hosts)-1)
	}
	if imp.In < 0 || imp.In > 100 || imp.Out < 0 || imp.Out > 100 {
		t.Fatalf("netns: Impair: host %d: %+v; want shares from 0 to 100", i, imp)
	}
	if err := ImpairUnavailable(); err != nil {
		t.Fatalf("netns: Impair: %v", err)
	}
	l.impaired[i] = imp
	for j, h := range l.Hosts {
		cmd := h.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(l.ingressRules(j))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("netns: Impair: nft in host %d's namespace: %v: %s", j, err, out)
		}
	}
}

// ingressRules is the nft script that gives host j's eth0 the drops the
// hosts' impairments call for, replacing the ones it had (a table that does
// not exist cannot be deleted, hence the empty one made first).
func (l *LAN) ingressRules(j int) string {
	drop := func(match string, share int) string {
		if share >= 100 {
			return "\t\t" + match + " drop\n"
		}
		return fmt.Sprintf("\t\t%s numgen random mod 100 < %d drop\n", match, share)
	}
	var rules strings.Builder
	if in := l.impaired[j].In; in > 0 {
		rules.WriteString(drop("meta protocol ip", in))
	}
	for i, imp := range l.impaired {
		if i != j && imp.Out > 0 {
			rules.WriteString(drop("ip saddr "+l.Hosts[i].IP, imp.Out))
		}
	}
	script := "table netdev mcnode\ndelete table netdev mcnode\n"
	if rules.Len() > 0 {
		script += "table netdev mcnode {\n\tchain lossy {\n" +
			"\t\ttype filter hook ingress device \"" + l.Hosts[j].Interface + "\" priority 0; policy accept;\n" +
			rules.String() + "\t}\n}\n"
	}
	return script
}

// plan returns the side of each of n hosts: k for a host in sides[k-1], 0
// for a host in no side.
func plan(n int, sides [][]int) ([]int, error) {
	side := make([]int, n)
	for k, s := range sides {
		for _, i := range s {
			if i < 0 || i >= n {
				return nil, fmt.Errorf("side %d lists host %d; the LAN has hosts 0 to %d", k+1, i, n-1)
			}
			if side[i] != 0 {
				return nil, fmt.Errorf("host %d is listed twice (sides %d and %d)", i, side[i], k+1)
			}
			side[i] = k + 1
		}
	}
	return side, nil
}

// veth is the name of the root-namespace end of host i's link.
func (l *LAN) veth(i int) string { return fmt.Sprintf("%s%s-%d", vethPrefix, l.id, i) }

// ipCmd runs ip with args, failing the test with its output if it fails.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// noIPv6 turns IPv6 off on an interface the LAN made in the root namespace,
// before it is up: otherwise the kernel gives it a link-local address, and
// the root namespace would take part in the LAN's IPv6 traffic. Where the
// kernel has no IPv6 there is nothing to do.
func noIPv6(t *testing.T, dev string) {
	t.Helper()
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("netns: turning IPv6 off on %s: %v", dev, err)
	}
}

const (
	bridgePrefix = "mcbr"        // then the LAN's id (and pK for side K's bridge)
	hostPrefix   = "mcn"         // then the LAN's id, "-" and the host's index: a namespace
	vethPrefix   = "mv"          // then the LAN's id, "-" and the host's index
	aliasPrefix  = "mcnode-lan " // then the creator's processToken
)

// processToken names a live process so that a later process reusing its PID
// is not taken for it: its PID namespace, then the PID and the process's
// start time (field 22 of /proc/PID/stat, in clock ticks since boot). A
// process in another PID namespace (another container sharing the network
// namespace) has a PID that means nothing here: its token never matches,
// and its LANs are never taken for orphans (see alive).
func processToken(pid int) (string, error) {
	pidNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return "", err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after its closing parenthesis (field 3 onwards).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", fmt.Errorf("cannot read /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("cannot read the start time in /proc/%d/stat", pid)
	}
	return fmt.Sprintf("%s/%d/%s", pidNS, pid, fields[19]), nil
}

// alive reports whether the process a processToken names may still run:
// false only if it was made in this process's PID namespace and no process
// with that PID and start time runs there now.
func alive(token string) bool {
	parts := strings.Split(token, "/")
	self, err := os.Readlink("/proc/self/ns/pid")
	if len(parts) != 3 || err != nil || parts[0] != self {
		return true // not ours to judge: leave the LAN alone
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return true
	}
	now, err := processToken(pid)
	return err == nil && now == token
}

// sweepOrphans removes the LANs of creators that are dead: for each bridge
// whose alias names a creator, it kills what still runs in the LAN's
// namespaces and removes them with the LAN's links. LANs of live creators
// (other test processes running now) and bridges without the alias are
// left alone.
func sweepOrphans(t *testing.T) {
	t.Helper()
	aliases, _ := filepath.Glob("/sys/class/net/" + bridgePrefix + "*/ifalias")
	for _, path := range aliases {
		alias, err := os.ReadFile(path)
		token, ours := strings.CutPrefix(strings.TrimSpace(string(alias)), aliasPrefix)
		if err != nil || !ours || alive(token) {
			continue
		}
		id := strings.TrimPrefix(filepath.Base(filepath.Dir(path)), bridgePrefix)
		if _, err := hex.DecodeString(id); err != nil || len(id) != 6 {
			continue // not a name NewLAN gives: removing by its prefix could hit others
		}
		t.Logf("netns: removing test LAN %s, left by process %s, which is dead", id, token)
		removeOrphan(id)
	}
}

// removeOrphan removes what a LAN with the given id left, by name, as
// remove does (veths, then namespaces, then bridges), after killing what
// still runs in its namespaces: a namespace a process holds outlives its
// name.
func removeOrphan(id string) {
	spaces, _ := filepath.Glob("/var/run/netns/" + hostPrefix + id + "-*")
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		left := false
		for _, ns := range spaces {
			out, _ := exec.Command("ip", "netns", "pids", filepath.Base(ns)).Output()
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left = true
				}
			}
		}
		if !left {
			break
		}
	}
	del := func(pattern string, args ...string) {
		names, _ := filepath.Glob(pattern)
		for _, name := range names {
			_ = exec.Command("ip", append(args, filepath.Base(name))...).Run()
		}
	}
	del("/sys/class/net/"+vethPrefix+id+"-*", "link", "del")
	del("/var/run/netns/"+hostPrefix+id+"-*", "netns", "del")
	del("/sys/class/net/"+bridgePrefix+id+"*", "link", "del")
}

// remove deletes the veth pairs, the namespaces and the bridges. The veth
// pairs go first, explicitly: a namespace that some process still holds
// outlives "ip netns del", and its veth would otherwise stay behind.
func (l *LAN) remove() {
	for i, h := range l.Hosts {
		_ = exec.Command("ip", "link", "del", l.veth(i)).Run()
		_ = exec.Command("ip", "netns", "del", h.NS).Run()
	}
	for _, b := range l.extra {
		_ = exec.Command("ip", "link", "del", b).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
}
