package netns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

func TestPartitionPlan(t *testing.T) {
	for _, c := range []struct {
		n     int
		sides [][]int
		want  []int
		err   string
	}{
		{n: 3, want: []int{0, 0, 0}},
		{n: 4, sides: [][]int{{0, 1}, {2, 3}}, want: []int{1, 1, 2, 2}},
		{n: 4, sides: [][]int{{3}}, want: []int{0, 0, 0, 1}},
		{n: 3, sides: [][]int{{}, {1}}, want: []int{0, 2, 0}},
		{n: 3, sides: [][]int{{3}}, err: "side 1 lists host 3; the LAN has hosts 0 to 2"},
		{n: 3, sides: [][]int{{-1}}, err: "side 1 lists host -1"},
		{n: 3, sides: [][]int{{0, 1}, {1}}, err: "host 1 is listed twice (sides 1 and 2)"},
		{n: 3, sides: [][]int{{2, 2}}, err: "host 2 is listed twice (sides 1 and 1)"},
	} {
		got, err := plan(c.n, c.sides)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("plan(%d, %v): error %v, want one containing %q", c.n, c.sides, err, c.err)
		case c.err == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("plan(%d, %v) = %v, %v; want %v", c.n, c.sides, got, err, c.want)
		}
	}
}

// TestLANPartition checks, with UDP unicast and multicast between every two
// hosts (and ping where it is installed), that Partition cuts exactly the
// links it should and Heal restores them, and that nothing of the LAN is
// left once the test ends.
func TestLANPartition(t *testing.T) {
	var lan *LAN
	var extra []string
	t.Cleanup(func() { // registered before NewLAN's cleanup, so it runs after it
		if lan != nil {
			checkRemoved(t, lan.id, extra)
		}
	})
	lan = NewLAN(t, 4)
	ping := true
	if _, err := exec.LookPath("ping"); err != nil {
		ping = false
		t.Log("ping is not installed (Debian package iputils-ping): checking with UDP unicast and multicast only")
	}
	check := func(step string, groups ...[]int) {
		t.Helper()
		checkReach(t, lan, step, ping, groups)
	}

	check("new LAN", []int{0, 1, 2, 3})

	lan.Partition(t, []int{0, 1}, []int{2, 3})
	extra = slices.Clone(lan.extra)
	checkBridges(t, lan, lan.bridge+"p1", lan.bridge+"p1", lan.bridge+"p2", lan.bridge+"p2")
	check("partitioned {0,1} {2,3}", []int{0, 1}, []int{2, 3})

	lan.Heal(t)
	checkBridges(t, lan, lan.bridge, lan.bridge, lan.bridge, lan.bridge)
	check("healed", []int{0, 1, 2, 3})

	lan.Partition(t, []int{3})
	checkBridges(t, lan, lan.bridge, lan.bridge, lan.bridge, lan.bridge+"p1")
	check("partitioned {3}", []int{0, 1, 2}, []int{3})

	// From scratch: host 3, listed no more, goes back to the original bridge.
	lan.Partition(t, []int{1, 2})
	checkBridges(t, lan, lan.bridge, lan.bridge+"p1", lan.bridge+"p1", lan.bridge)
	check("re-partitioned {1,2}", []int{0, 3}, []int{1, 2})

	lan.Heal(t)
	check("healed again", []int{0, 1, 2, 3})
	if len(lan.extra) != 2 {
		t.Errorf("the LAN made bridges %v, want 2", lan.extra)
	}
	extra = slices.Clone(lan.extra)
}

// TestLANImpair checks that Impair cuts one direction of a host's link (a
// host that cannot hear, one that cannot be heard), that it loses about the
// share asked for, that Impairment{} restores the link, and that its rules
// live in the hosts' namespaces only.
func TestLANImpair(t *testing.T) {
	if err := ImpairUnavailable(); err != nil {
		t.Skip("skipped: " + err.Error())
	}
	lan := NewLAN(t, 4)
	ping := true
	if _, err := exec.LookPath("ping"); err != nil {
		ping = false
	}
	reach := func(deaf, mute int) [][]bool {
		w := make([][]bool, len(lan.Hosts))
		for a := range w {
			w[a] = make([]bool, len(lan.Hosts))
			for b := range w[a] {
				w[a][b] = a != b && b != deaf && a != mute
			}
		}
		return w
	}

	lan.Impair(t, 1, Impairment{In: 100})
	lan.Impair(t, 2, Impairment{Out: 100})
	checkReachMatrix(t, lan, "host 1 deaf, host 2 mute", ping, reach(1, 2))
	if out, err := exec.Command("nft", "list", "tables").CombinedOutput(); err != nil || strings.Contains(string(out), "mcnode") {
		t.Errorf("the root namespace's nftables: %v: %s; want no table of the LAN's", err, out)
	}

	lan.Impair(t, 1, Impairment{})
	checkReachMatrix(t, lan, "host 1 restored", ping, reach(-1, 2))

	// About half of 400 datagrams arrive: outside 120..280 is beyond ten
	// standard deviations of a fair coin, and far from 0 or 400.
	const sent = 400
	lan.Impair(t, 3, Impairment{In: 50})
	if got := countUDP(t, lan, 0, 3, sent); got < 120 || got > 280 {
		t.Errorf("host 3 losing 50%% of what it receives got %d of %d datagrams", got, sent)
	}
	lan.Impair(t, 3, Impairment{Out: 50})
	if got := countUDP(t, lan, 3, 0, sent); got < 120 || got > 280 {
		t.Errorf("host 0 got %d of %d datagrams from host 3, which loses 50%% of what it sends", got, sent)
	}
	if got := countUDP(t, lan, 0, 3, sent); got != sent {
		t.Errorf("host 3, losing only what it sends, got %d of %d datagrams", got, sent)
	}
	lan.Impair(t, 3, Impairment{})
	if got := countUDP(t, lan, 3, 0, sent); got != sent {
		t.Errorf("host 0 got %d of %d datagrams from host 3 restored", got, sent)
	}
}

// TestLANSetLink checks that a host whose link is down gets nothing, and
// that once it is up again every host reaches every other.
func TestLANSetLink(t *testing.T) {
	lan := NewLAN(t, 3)
	lan.SetLink(t, 2, false)
	if got := countUDP(t, lan, 0, 2, 20); got != 0 {
		t.Errorf("host 2, its link down, got %d of 20 datagrams", got)
	}
	lan.SetLink(t, 2, true)
	checkReach(t, lan, "link up again", false, [][]int{{0, 1, 2}})
}

// countUDP sends n datagrams from host a to host b and returns how many
// arrived. It reads while it sends, so that no socket buffer overflows.
func countUDP(t *testing.T, lan *LAN, a, b, n int) int {
	t.Helper()
	var from, to net.PacketConn
	for i, c := range []*net.PacketConn{&from, &to} {
		h := lan.Hosts[[]int{a, b}[i]]
		if err := inNS(h.NS, func() (err error) {
			*c, err = net.ListenPacket("udp4", fmt.Sprintf("%s:%d", h.IP, probePort))
			return err
		}); err != nil {
			t.Fatalf("opening a socket in %s: %v", h.NS, err)
		}
		defer (*c).Close()
	}
	got := make(chan int)
	go func() {
		k := 0
		buf := make([]byte, 16)
		for {
			// The deadline moves on with every datagram: it ends the count
			// once the sender is done.
			_ = to.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := to.ReadFrom(buf); err != nil {
				got <- k
				return
			}
			k++
		}
	}()
	dst := &net.UDPAddr{IP: net.ParseIP(lan.Hosts[b].IP), Port: probePort}
	for k := range n {
		if _, err := from.WriteTo([]byte("x"), dst); err != nil {
			t.Errorf("host %d sending to host %d: %v", a, b, err)
			break
		}
		if k%20 == 19 {
			time.Sleep(time.Millisecond)
		}
	}
	return <-got
}

// checkBridges checks which bridge each host's veth is attached to, that
// every bridge of the LAN is up with multicast snooping off, and that no
// interface of the LAN in the root namespace has an address.
func checkBridges(t *testing.T, lan *LAN, want ...string) {
	t.Helper()
	for i, w := range want {
		master, err := filepath.EvalSymlinks("/sys/class/net/" + lan.veth(i) + "/master")
		if err != nil || filepath.Base(master) != w {
			t.Errorf("host %d's veth %s is attached to %q (%v), want %s", i, lan.veth(i), filepath.Base(master), err, w)
		}
	}
	for _, b := range append([]string{lan.bridge}, lan.extra...) {
		snoop, err := os.ReadFile("/sys/class/net/" + b + "/bridge/multicast_snooping")
		if err != nil || strings.TrimSpace(string(snoop)) != "0" {
			t.Errorf("bridge %s: multicast_snooping %q (%v), want 0", b, snoop, err)
		}
		ifi, err := net.InterfaceByName(b)
		if err != nil || ifi.Flags&net.FlagUp == 0 {
			t.Errorf("bridge %s is not up: %v %v", b, ifi, err)
		}
	}
	out, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -o addr show: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, lan.id) {
			t.Errorf("an interface of the LAN has an address in the root namespace: %s", line)
		}
	}
}

// checkRemoved checks that no interface or namespace named with the LAN's id
// is left, and that the bridges Partition made are gone.
func checkRemoved(t *testing.T, id string, extra []string) {
	t.Helper()
	if len(extra) == 0 && !t.Failed() {
		t.Error("Partition made no bridge: nothing to check the removal of")
	}
	checkNoneNamed(t, id)
	for _, b := range extra {
		if _, err := os.Stat("/sys/class/net/" + b); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("bridge %s is still there (%v)", b, err)
		}
	}
}

// checkNoneNamed checks that no interface or namespace named with id is left.
func checkNoneNamed(t *testing.T, id string) {
	t.Helper()
	for _, args := range [][]string{{"-o", "link", "show"}, {"netns", "list"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, id) {
				t.Errorf("left after the LAN was removed (ip %s): %s", strings.Join(args, " "), line)
			}
		}
	}
}

const (
	probePort = 47001
	groupPort = 47002
)

var probeGroup = net.IPv4(239, 77, 0, 1)

// checkReach checks that two hosts reach each other exactly when they are in
// the same group (see checkReachMatrix).
func checkReach(t *testing.T, lan *LAN, step string, ping bool, groups [][]int) {
	t.Helper()
	group := make([]int, len(lan.Hosts))
	for g, hosts := range groups {
		for _, i := range hosts {
			group[i] = g
		}
	}
	want := make([][]bool, len(lan.Hosts))
	for a := range want {
		want[a] = make([]bool, len(lan.Hosts))
		for b := range want[a] {
			want[a][b] = group[a] == group[b]
		}
	}
	checkReachMatrix(t, lan, step, ping, want)
}

// checkReachMatrix checks that what host a sends reaches host b exactly when
// want[a][b]: by UDP to b's address, by UDP to a multicast group joined on
// eth0 and, if ping is set, by ping (answered only if both ways are open).
func checkReachMatrix(t *testing.T, lan *LAN, step string, ping bool, want [][]bool) {
	t.Helper()
	var pings [][]bool
	var wg sync.WaitGroup
	if ping {
		wg.Add(1)
		go func() { defer wg.Done(); pings = pingAll(t, lan) }()
	}
	uni, multi := probeUDP(t, lan)
	wg.Wait()
	for a := range lan.Hosts {
		for b := range lan.Hosts {
			if a == b {
				continue
			}
			if uni[a][b] != want[a][b] {
				t.Errorf("%s: UDP from host %d to host %d arrived: %v, want %v", step, a, b, uni[a][b], want[a][b])
			}
			if multi[a][b] != want[a][b] {
				t.Errorf("%s: multicast from host %d to host %d arrived: %v, want %v", step, a, b, multi[a][b], want[a][b])
			}
			if both := want[a][b] && want[b][a]; pings != nil && pings[a][b] != both {
				t.Errorf("%s: ping from host %d to host %d answered: %v, want %v", step, a, b, pings[a][b], both)
			}
		}
	}
}

// pingAll pings every host from every other, all at once, and reports which
// got an answer.
func pingAll(t *testing.T, lan *LAN) [][]bool {
	n := len(lan.Hosts)
	got := make([][]bool, n)
	for a := range got {
		got[a] = make([]bool, n)
	}
	var wg sync.WaitGroup
	for a, ha := range lan.Hosts {
		for b, hb := range lan.Hosts {
			if a == b {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := ha.Command("ping", "-n", "-c", "1", "-W", "1", hb.IP).CombinedOutput()
				var exit *exec.ExitError
				switch {
				case err == nil:
					got[a][b] = true
				case errors.As(err, &exit) && exit.ExitCode() == 1: // no answer
				default:
					t.Errorf("ping from host %d to %s: %v: %s", a, hb.IP, err, out)
				}
			}()
		}
	}
	wg.Wait()
	return got
}

// probeUDP has every host send a datagram to every other host's address and
// one to a multicast group that every host joined on eth0, three times over
// a few hundred milliseconds, and reports which arrived: uni[a][b] if host b
// got host a's datagram, multi[a][b] if it got a's multicast one.
func probeUDP(t *testing.T, lan *LAN) (uni, multi [][]bool) {
	t.Helper()
	n := len(lan.Hosts)
	uni, multi = make([][]bool, n), make([][]bool, n)
	for a := range n {
		uni[a], multi[a] = make([]bool, n), make([]bool, n)
	}
	nonce := fmt.Sprintf("%d", time.Now().UnixNano())
	ucs := make([]net.PacketConn, n)
	mcs := make([]net.PacketConn, n)
	defer func() {
		for i := range n {
			if ucs[i] != nil {
				ucs[i].Close()
			}
			if mcs[i] != nil {
				mcs[i].Close()
			}
		}
	}()
	for i, h := range lan.Hosts {
		err := inNS(h.NS, func() error {
			ifi, err := net.InterfaceByName(h.Interface)
			if err != nil {
				return err
			}
			uc, err := net.ListenPacket("udp4", fmt.Sprintf("%s:%d", h.IP, probePort))
			if err != nil {
				return err
			}
			ucs[i] = uc
			if err := ipv4.NewPacketConn(uc).SetMulticastInterface(ifi); err != nil {
				return err
			}
			mc, err := net.ListenMulticastUDP("udp4", ifi, &net.UDPAddr{IP: probeGroup, Port: groupPort})
			if err != nil {
				return err
			}
			mcs[i] = mc
			return nil
		})
		if err != nil {
			t.Fatalf("opening sockets in host %d's namespace %s: %v", i, h.NS, err)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(600 * time.Millisecond)
	read := func(c net.PacketConn, b int, got [][]bool) {
		defer wg.Done()
		_ = c.SetReadDeadline(deadline)
		buf := make([]byte, 64)
		for {
			m, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			var a int
			var from string
			if _, err := fmt.Sscanf(string(buf[:m]), "%s %d", &from, &a); err == nil && from == nonce && a >= 0 && a < n {
				mu.Lock()
				got[a][b] = true
				mu.Unlock()
			}
		}
	}
	for b := range n {
		wg.Add(2)
		go read(ucs[b], b, uni)
		go read(mcs[b], b, multi)
	}
	for range 3 {
		for a := range n {
			msg := []byte(fmt.Sprintf("%s %d", nonce, a))
			for b, hb := range lan.Hosts {
				if a != b {
					if _, err := ucs[a].WriteTo(msg, &net.UDPAddr{IP: net.ParseIP(hb.IP), Port: probePort}); err != nil {
						t.Errorf("host %d sending to %s: %v", a, hb.IP, err)
					}
				}
			}
			if _, err := ucs[a].WriteTo(msg, &net.UDPAddr{IP: probeGroup, Port: groupPort}); err != nil {
				t.Errorf("host %d sending to %v: %v", a, probeGroup, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	return uni, multi
}

// inNS runs f on an OS thread that has entered the named network namespace:
// the sockets f opens belong to that namespace for good, wherever they are
// used afterwards. The thread goes back to its own namespace after f, or
// ends if it cannot.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		err = f()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine
		errc <- err
	}()
	return <-errc
}

// TestLANSweepsOrphans kills a test process that holds a LAN (as go test's
// -timeout or a SIGKILL would) and checks that the process it ran in the
// LAN dies with it, that the next NewLAN removes the LAN and kills what
// still ran there, and that it leaves alone the LAN of a creator that is
// alive.
func TestLANSweepsOrphans(t *testing.T) {
	if os.Getenv(orphanHelperEnv) != "" {
		t.Skip("runs the orphan helper instead")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: building a test LAN of network namespaces needs root; run `make test` as root")
	}
	dead, deadID, fellow := startLANHelper(t)
	live, liveID, _ := startLANHelper(t)
	t.Cleanup(func() {
		_ = live.Process.Kill()
		_ = live.Wait()
		sweepOrphans(t) // the live helper's LAN is an orphan now
		checkNoneNamed(t, liveID)
	})

	// A process in the LAN that does not die with the creator: started here,
	// not by the helper.
	stray := exec.Command("ip", "netns", "exec", hostPrefix+deadID+"-1", "sleep", "600")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strayDone := make(chan error, 1)
	go func() { strayDone <- stray.Wait() }()

	_ = dead.Process.Kill()
	_ = dead.Wait()
	if !gone(fellow, 2*time.Second) {
		t.Errorf("the process the dead helper started with Host.Command (pid %d) still runs", fellow)
	}
	if !strings.Contains(ipOutput(t, "netns", "list"), deadID) {
		t.Fatal("the dead helper's LAN was removed before any NewLAN: the test checks nothing")
	}

	NewLAN(t, 1)
	checkNoneNamed(t, deadID)
	select {
	case <-strayDone:
	case <-time.After(2 * time.Second):
		t.Error("a process left in the dead helper's LAN still runs after the sweep")
		_ = stray.Process.Kill()
	}
	if out := ipOutput(t, "netns", "list"); !strings.Contains(out, liveID) {
		t.Errorf("the LAN of a live creator was removed:\n%s", out)
	}
}

// TestLANOrphanHelper is the creator TestLANSweepsOrphans kills: it builds a
// LAN of two hosts, starts sleep in host 0, prints the LAN's id and the
// sleep's pid, and waits to be killed.
func TestLANOrphanHelper(t *testing.T) {
	if os.Getenv(orphanHelperEnv) == "" {
		t.Skip("a helper process of TestLANSweepsOrphans")
	}
	lan := NewLAN(t, 2)
	cmd := lan.Hosts[0].Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("LAN %s %d\n", lan.id, cmd.Process.Pid)
	time.Sleep(10 * time.Minute)
}

const orphanHelperEnv = "MCNODE_TEST_LAN_ORPHAN_HELPER"

// startLANHelper starts TestLANOrphanHelper and returns it once its LAN is
// built, with the LAN's id and the pid of the process it started there.
func startLANHelper(t *testing.T) (*exec.Cmd, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLANOrphanHelper$", "-test.v", "-test.timeout=11m")
	cmd.Env = append(os.Environ(), orphanHelperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var got []byte
		for {
			n, err := out.Read(buf)
			got = append(got, buf[:n]...)
			for _, line := range strings.Split(string(got), "\n") {
				if strings.HasPrefix(line, "LAN ") && strings.Count(line, " ") == 2 {
					lines <- line
					_, _ = io.Copy(io.Discard, out)
					return
				}
			}
			if err != nil {
				lines <- string(got)
				return
			}
		}
	}()
	select {
	case line := <-lines:
		var id string
		var pid int
		if _, err := fmt.Sscanf(line, "LAN %s %d", &id, &pid); err != nil {
			t.Fatalf("the LAN helper said %q", line)
		}
		return cmd, id, pid
	case <-time.After(30 * time.Second):
		t.Fatal("the LAN helper built no LAN in 30 s")
	}
	return nil, "", 0
}

// gone reports whether process pid has exited (or is a zombie) within d.
func gone(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// ipOutput runs ip with args and returns its output.
func ipOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// alive judges only creators of its own PID namespace: a PID of another
// (a container sharing the network namespace) names some other process
// here, or none, and its LAN must be left alone.
func TestAliveJudgesOnlyItsPIDNamespace(t *testing.T) {
	self, err := processToken(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !alive(self) {
		t.Errorf("this process (%s) is taken for dead", self)
	}
	ns := strings.Split(self, "/")[0]
	if dead := ns + "/1/1"; alive(dead) {
		t.Errorf("%s, PID 1 with another start time, is taken for alive", dead)
	}
	for _, foreign := range []string{"pid:[1]/1/1", "pid:[1]/" + strings.SplitN(self, "/", 2)[1], "garbage", ns + "/x/1"} {
		if !alive(foreign) {
			t.Errorf("%q is taken for dead: a LAN it names would be removed", foreign)
		}
	}
}
