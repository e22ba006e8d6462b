package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// The test binary doubles as mcnode: the end-to-end tests run it as separate
// processes, each in its own network namespace (host) on one bridge (LAN).
func TestMain(m *testing.M) {
	if os.Getenv("MCNODE_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// cluster is a LAN of hosts, some running `mcnode run`.
type cluster struct {
	t       *testing.T
	lan     *netns.LAN
	dir     string
	daemons []*exec.Cmd
	env     func(i int) []string       // more environment for host i's commands
	daemon  func(i int, cmd *exec.Cmd) // adjusts host i's daemon before it starts
}

func newCluster(t *testing.T, hosts, daemons int) *cluster {
	t.Helper()
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	for i := 0; i < daemons; i++ {
		c.startDaemon(i)
		if i == 0 {
			c.waitMembers(0, 1) // the first founds; the rest join it
		}
	}
	for i := 0; i < daemons; i++ {
		c.waitMembers(i, daemons)
	}
	return c
}

// mcnode returns a command running mcnode on host i, configured through the
// environment twins of the flags.
func (c *cluster) mcnode(i int, args ...string) *exec.Cmd {
	cmd := c.lan.Hosts[i].Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(),
		"MCNODE_TEST_MAIN=1",
		"MCNODE_GROUP=e2e",
		"MCNODE_INTERFACE=eth0",
		"MCNODE_SOCKET="+c.socket(i),
		"MCNODE_STATE_DIR="+filepath.Join(c.dir, fmt.Sprintf("state%d", i)), // each host its own
		"MCNODE_JOIN_TIMEOUT=300ms",
		"MCNODE_LOG_FORMAT=json",
		"GORACE=atexit_sleep_ms=0", // a -race build otherwise sleeps a second at exit
	)
	if c.env != nil {
		cmd.Env = append(cmd.Env, c.env(i)...)
	}
	if level := os.Getenv("E2E_LOG_LEVEL"); level != "" { // E2E_LOG_LEVEL=debug for the daemons' whole story
		cmd.Env = append(cmd.Env, "MCNODE_LOG_LEVEL="+level)
	}
	return cmd
}

// underShell makes cmd, a command c.mcnode made, run mcnode from
// `sh -c script`, which then execs it: for what must be set up in the
// process first (an ignored signal, a mount in its own mount namespace).
func underShell(cmd *exec.Cmd, script string) *exec.Cmd {
	self := slices.Index(cmd.Args, os.Args[0])
	cmd.Args = slices.Insert(cmd.Args, self, "sh", "-c", script+` && exec "$0" "$@"`)
	return cmd
}

func (c *cluster) startDaemon(i int) {
	c.t.Helper()
	cmd := c.mcnode(i, "run")
	logf, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("daemon%d.log", i)))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.daemon != nil {
		c.daemon(i, cmd)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.daemons[i] = cmd
	c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if c.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			c.t.Logf("daemon on host %d:\n%s", i, b)
		}
	})
}

// background is a command started in the background: its output so far,
// and its exit once it ends. The test kills it if it still runs at the end.
type background struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func (c *cluster) background(cmd *exec.Cmd) *background {
	c.t.Helper()
	b := &background{cmd: cmd, out: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { b.done <- cmd.Wait() }()
	c.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return b
}

// wantExit waits up to 10 s for the command to exit with status code; what
// names it in a failure.
func (b *background) wantExit(t *testing.T, code int, what string) {
	t.Helper()
	select {
	case err := <-b.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != code {
			t.Fatalf("%s exited with %v, want status %d: %s", what, err, code, b.out)
		}
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill() // its output is read once it has exited
		<-b.done
		t.Fatalf("%s did not exit within 10 s: %s", what, b.out)
	}
}

// kill stops host i's daemon with SIGKILL.
func (c *cluster) kill(i int) {
	c.t.Helper()
	if err := c.daemons[i].Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	_ = c.daemons[i].Wait()
}

func (c *cluster) socket(i int) string { return filepath.Join(c.dir, fmt.Sprintf("host%d.sock", i)) }

// status asks host i's daemon directly: Unix sockets live in the file system,
// which the namespaces share, and a direct question is answered in about a
// millisecond, where starting `mcnode status` takes far longer. The tests
// that kill a daemon need a fresh answer.
func (c *cluster) status(i int) (*statusView, error) {
	v, err := daemonStatus(c.socket(i), "")
	if err != nil {
		return nil, fmt.Errorf("status of host %d: %w", i, err)
	}
	return v, nil
}

// statusCommand runs `mcnode status --json` on host i, as a user would.
func (c *cluster) statusCommand(i int) (*statusView, error) {
	out, err := c.mcnode(i, "status", "--json").Output()
	if err != nil {
		return nil, fmt.Errorf("status on host %d: %w: %s", i, err, out)
	}
	var v statusView
	return &v, json.Unmarshal(out, &v)
}

// waitStatus polls host i's daemon until cond holds, and fails the test if
// it does not within 20 seconds.
func (c *cluster) waitStatus(i int, what string, cond func(*statusView) bool) *statusView {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := c.status(i)
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("host %d: not within 20s: %s (last status %+v, %v)", i, what, v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) waitMembers(i, n int) *statusView {
	c.t.Helper()
	return c.waitStatus(i, fmt.Sprintf("%d members", n), func(v *statusView) bool { return len(v.Members) == n })
}

// holding reports whether the status shows resource r held (by host, if
// host >= 0) with n waiters.
func (c *cluster) holding(r string, host, n int) func(*statusView) bool {
	return func(v *statusView) bool {
		return slices.ContainsFunc(v.Resources, func(x resourceView) bool {
			return x.Name == r && x.Holder != 0 && (host < 0 || c.hostOf(v, x.Holder) == host) && len(x.Queue) == n
		})
	}
}

// hostOf maps a member to its host by address.
func (c *cluster) hostOf(v *statusView, id uint64) int {
	for _, m := range v.Members {
		if m.ID == id {
			for i, h := range c.lan.Hosts {
				if strings.HasPrefix(m.Addr, h.IP+":") {
					return i
				}
			}
		}
	}
	return -1
}

// quietHost waits until host i is neither the server nor the member the
// server hands over to next: the tests that use it time a reclaim by the
// lease, which a takeover would add its own wait to (the failover tests
// kill the server on purpose).
func (c *cluster) quietHost(i, observer int) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		v, err := c.status(observer)
		if err == nil {
			srv := c.hostOf(v, v.Server)
			next := -1
			for k, m := range v.Members {
				if m.ID == v.Server {
					next = c.hostOf(v, v.Members[(k+1)%len(v.Members)].ID)
				}
			}
			if srv != i && next != i {
				c.t.Logf("killing host %d: host %d sees server %d (host %d), T=%d, successor host %d", i, observer, v.Server, srv, v.T, next)
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("host %d never stopped being the server or its successor", i)
}

// Concurrent `mcnode lock` from every host guard a shared counter file: the
// final count equals the number of locks taken, no two critical sections
// overlap, and the fencing tokens increase in critical-section order. One
// host runs no daemon: its locks join the group for their duration.
func TestE2ECounterUnderLock(t *testing.T) {
	const hosts = 4
	c := newCluster(t, hosts, hosts-1)
	counterUnderLock(t, c, hosts, 6, 2)
	// The host without a daemon leaves the group after each lock: its
	// last leave is recorded at once, or (unconfirmed within mcnode lock's
	// leave timeout, as on a loaded machine) it is removed after its lease.
	c.waitMembers(0, hosts-1)
	v, err := c.statusCommand(0)
	if err != nil || len(v.Members) != hosts-1 || v.Server == 0 {
		t.Fatalf("mcnode status: %v %+v", err, v)
	}
}

// TestE2EQuorumCounterUnderLock is the same test in quorum mode, for every
// protocol: daemons on four hosts run it over TCP, each host locks through
// its own.
func TestE2EQuorumCounterUnderLock(t *testing.T) {
	const hosts = 4
	for _, algo := range protocols.Names() {
		t.Run(algo, func(t *testing.T) {
			c := newQuorumCluster(t, hosts, algo, "grid")
			counterUnderLock(t, c, hosts, 4, 4)
			v, err := c.statusCommand(1)
			if err != nil || v.Mode != modeQuorum || v.Protocol != algo || len(v.Members) != hosts || v.Self != 1 {
				t.Fatalf("mcnode status: %v %+v", err, v)
			}
		})
	}
}

// TestE2EQuorumPeersFromGroup: quorum mode without --peers takes its nodes
// from the multicast group's membership (--quorum-size). With a group key:
// the multicast group is sealed, the quorum links are TLS. The last host's
// daemon reads its key from a pipe, which can be read once: its node and
// the group it finds its peers in take the same keys (the group read the
// file again, found it empty, and the daemon stopped).
func TestE2EQuorumPeersFromGroup(t *testing.T) {
	const hosts = 3
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	keyfile := filepath.Join(c.dir, "group.key")
	if out, err := c.mcnode(0, "keygen", keyfile).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	key, err := os.ReadFile(keyfile)
	if err != nil {
		t.Fatal(err)
	}
	c.daemon = func(i int, cmd *exec.Cmd) {
		if i == hosts-1 {
			cmd.Args = append(cmd.Args, "--keyfile", "/dev/stdin")
			cmd.Stdin = bytes.NewReader(key)
		}
	}
	c.env = func(int) []string {
		return []string{"MCNODE_MODE=quorum", "MCNODE_ALGO=kakugawa", "MCNODE_COTERIE=majority", fmt.Sprintf("MCNODE_QUORUM_SIZE=%d", hosts),
			"MCNODE_KEYFILE=" + keyfile}
	}
	for i := range hosts {
		c.startDaemon(i)
		// One at a time, so that the first founds the group and the others join it.
		c.waitLog(i, "waiting for the multicast group")
		if i == 0 {
			// What it waits for, in its status (it said only "starting
			// the quorum node", however long; found by review).
			want := "finding the quorum mode's 3 nodes in it: 1 member so far"
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := c.status(0)
				if err != nil && strings.Contains(err.Error(), want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("host 0's status while it finds its peers: %v, want %q", err, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for i := range hosts {
		v := c.waitStatus(i, "peers from the group", func(v *statusView) bool { return len(v.Members) == hosts })
		if v.Mode != modeQuorum || v.Protocol != "kakugawa" || !strings.HasPrefix(v.Members[v.Self].Addr, c.lan.Hosts[i].IP+":") {
			t.Fatalf("host %d: %+v", i, v)
		}
	}
	counterUnderLock(t, c, hosts, 3, 3)
}

// waitLog waits until host i's daemon has logged a line containing what.
func (c *cluster) waitLog(i int, what string) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("daemon%d.log", i))); bytes.Contains(b, []byte(what)) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("daemon %d never logged %q", i, what)
}

// newQuorumCluster runs a quorum-mode daemon on every host.
func newQuorumCluster(t *testing.T, hosts int, algo, coterie string) *cluster {
	t.Helper()
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	var peers []string
	for _, h := range c.lan.Hosts {
		peers = append(peers, h.IP+":7950")
	}
	c.env = func(i int) []string {
		return []string{"MCNODE_MODE=quorum", "MCNODE_ALGO=" + algo, "MCNODE_COTERIE=" + coterie,
			"MCNODE_PEERS=" + strings.Join(peers, ","), fmt.Sprintf("MCNODE_NODE_ID=%d", i)}
	}
	for i := range hosts {
		c.startDaemon(i)
	}
	for i := range hosts {
		c.waitStatus(i, "its control socket", func(*statusView) bool { return true })
	}
	return c
}

// TestE2EQuorumDifferentPeerListsStop: daemons given different peer lists
// (hosts 0 and 1 the first three hosts, the others all five), each side
// with majority quorums of its own. Before, each side put the other's nodes
// down for their refused links and granted through substitute quorums: two
// holders in 14 of 20 entries (black-box round). Now a daemon that meets the
// other setup on a link exits with status 1 and says so, and no two
// daemons of different setups run on together: the ones left (a node that
// only strangers' hellos reached, the others having stopped first) are of
// one setup.
func TestE2EQuorumDifferentPeerListsStop(t *testing.T) {
	const hosts = 5
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	var peers []string
	for _, h := range c.lan.Hosts {
		peers = append(peers, h.IP+":7950")
	}
	short := func(i int) bool { return i < 2 }
	c.env = func(i int) []string {
		list := peers
		if short(i) {
			list = peers[:3]
		}
		return []string{"MCNODE_MODE=quorum", "MCNODE_ALGO=maekawa", "MCNODE_COTERIE=majority",
			"MCNODE_PEERS=" + strings.Join(list, ","), fmt.Sprintf("MCNODE_NODE_ID=%d", i)}
	}
	var mu sync.Mutex
	stopped := map[int]bool{}
	var waits sync.WaitGroup
	for i := range hosts {
		c.startDaemon(i)
		waits.Add(1)
		go func() {
			defer waits.Done()
			err := c.daemons[i].Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				return // killed at the end
			}
			mu.Lock()
			stopped[i] = true
			mu.Unlock()
		}()
	}
	// The detection time (1 s) and a lease (1.5 s) with room to spare.
	time.Sleep(8 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	defer func() {
		// The survivors' Waits end before the cleanup's own (a race).
		for i := range hosts {
			if !stopped[i] {
				_ = c.daemons[i].Process.Kill()
			}
		}
		mu.Unlock()
		waits.Wait()
		mu.Lock()
	}()
	sides := map[bool]int{}
	for i := range hosts {
		if !stopped[i] {
			sides[short(i)]++
			continue
		}
		b, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("daemon%d.log", i)))
		if !bytes.Contains(b, []byte("another setup")) {
			t.Errorf("host %d's daemon exited without saying it met another setup:\n%s", i, b)
		}
	}
	if len(sides) > 1 {
		t.Fatalf("daemons of both peer lists still run: %d of the short list's, %d of the long one's (stopped: %v)", sides[true], sides[false], stopped)
	}
	if len(stopped) == 0 {
		t.Fatal("no daemon stopped")
	}
	t.Logf("stopped: %v", stopped)
}

// counterUnderLock has every host increment a shared counter file under
// the lock "counter" (the last host lastN times, the others perHost) and
// checks that nothing was lost, no two critical sections overlapped and the
// fencing tokens strictly increased.
func counterUnderLock(t *testing.T, c *cluster, hosts, perHost, lastN int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "counter"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	critical := `D="$1"
mkdir "$D/inside" 2>/dev/null || echo "overlap" >> "$D/overlaps"
n=$(cat "$D/counter")
echo "$MCNODE_TOKEN" >> "$D/tokens"
sleep 0.02
echo $((n+1)) > "$D/counter"
rmdir "$D/inside"`
	var mu sync.Mutex
	taken := 0
	var wg sync.WaitGroup
	for i := 0; i < hosts; i++ {
		n := perHost
		if i == hosts-1 {
			n = lastN // in multicast mode, no daemon: each lock joins the group first
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < n; k++ {
				out, err := c.mcnode(i, "lock", "--timeout", "60s", "counter", "--", "sh", "-c", critical, "sh", c.dir).CombinedOutput()
				if err != nil {
					t.Errorf("host %d lock %d: %v: %s", i, k, err, out)
					continue
				}
				mu.Lock()
				taken++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(filepath.Join(c.dir, "counter"))
	count, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || count != taken {
		t.Fatalf("counter %q after %d successful locks", b, taken)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "overlaps")); err == nil {
		t.Fatal("two critical sections overlapped")
	}
	tokens := parseUints(t, filepath.Join(c.dir, "tokens"))
	if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
		t.Fatalf("fencing tokens not strictly increasing: %v", tokens)
	}
	t.Logf("%d locks from %d hosts, counter %d, tokens %d..%d", taken, hosts, count, tokens[0], tokens[len(tokens)-1])
}

func parseUints(t *testing.T, path string) []uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// kill -9 of the daemon holding a lock: the lock client on that host is told
// (exit status 3), and the group reclaims the lock within the lease, its
// margin and one turn, for a waiter on another host.
func TestE2EKillHolderDaemon(t *testing.T) {
	c := newCluster(t, 3, 3)
	const holder, waiter = 1, 2
	// The command starts a grandchild; losing the lock must stop it too.
	client := c.background(c.mcnode(holder, "lock", "r", "--", "sh", "-c", `sleep 60 & echo $! > "$1"; wait`, "sh", filepath.Join(c.dir, "grandchild")))
	c.waitStatus(waiter, "the holder has the lock", c.holding("r", holder, 0))
	// The waiter queues behind the holder before the kill, so that what is
	// timed is the reclaim, not a process start.
	wait := c.background(c.mcnode(waiter, "lock", "--timeout", "30s", "r", "--", "true"))
	c.waitStatus(waiter, "the waiter queued", c.holding("r", holder, 1))
	c.quietHost(holder, waiter)
	c.kill(holder)
	killed := time.Now()
	if err := <-wait.done; err != nil {
		t.Fatalf("the lock was not reclaimed: %v: %s", err, wait.out)
	}
	took := time.Since(killed)
	// The configured reclaim time: the lease and its margin, counted in
	// whole turns from the end of the turn in which the holder was last
	// heard (so up to two turns more), and half a second of slack.
	d := group.DefaultLANConfig()
	bound := d.LeaseTimeout + d.LeaseMargin + 2*d.TurnTimeout + 500*time.Millisecond
	t.Logf("reclaimed %v after kill -9 of the holder's daemon (bound %v)", took.Round(time.Millisecond), bound)
	if took > bound {
		t.Fatalf("reclaim took %v, more than %v", took, bound)
	}
	client.wantExit(t, exitLost, "the holder's lock client, its daemon dead,")
	pids := parseUints(t, filepath.Join(c.dir, "grandchild"))
	if len(pids) != 1 {
		t.Fatalf("grandchild pid file: %v", pids)
	}
	for deadline := time.Now().Add(2 * time.Second); syscall.Kill(int(pids[0]), 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d still runs after the lock was lost", pids[0])
		}
	}
}

// kill -9 of a member that is not the server: the others go on taking locks
// at once, and the dead member is removed within the lease and a turn.
func TestE2EKillNonServerMember(t *testing.T) {
	c := newCluster(t, 4, 4)
	const victim, observer = 2, 0
	c.quietHost(victim, observer)
	c.kill(victim)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, i := range []int{0, 1, 3} {
		start := time.Now()
		cmd := c.mcnode(i, "lock", "--timeout", "10s", "x", "--", "true")
		if out, err := cmd.CombinedOutput(); err != nil || ctx.Err() != nil {
			t.Fatalf("host %d could not lock after a member died: %v: %s", i, err, out)
		}
		t.Logf("host %d: mcnode lock ran in %v (process start included) with a dead member in the view", i, time.Since(start).Round(time.Millisecond))
	}
	v := c.waitMembers(observer, 3)
	for _, m := range v.Members {
		if c.hostOf(v, m.ID) == victim {
			t.Fatalf("the dead member is still listed: %+v", v.Members)
		}
	}
}

// mcnode status on a host without a daemon joins the group to look, and
// reports the healthy group it found as healthy: a majority reached (it
// said "no quorum: no server heard", every time, having asked before the
// server's first ping to it).
func TestE2EStatusWithoutADaemon(t *testing.T) {
	c := newCluster(t, 2, 2)
	for range 3 {
		cmd := c.mcnode(1, "status", "--json")
		cmd.Env = append(cmd.Env, "MCNODE_SOCKET="+filepath.Join(c.dir, "no-daemon.sock"))
		out, err := cmd.Output()
		var v statusView
		if err != nil || json.Unmarshal(out, &v) != nil || !v.QuorumHeld || len(v.Members) != 3 {
			t.Fatalf("mcnode status without a daemon: %v: %s", err, out)
		}
	}
}

// kill -9 of a `mcnode lock` client: its command goes on, and so does the
// lock, which the command inherited (flock(1) semantics); the lock is free
// once the command ends.
func TestE2EKillLockClient(t *testing.T) {
	c := newCluster(t, 2, 2)
	const work = 1500 * time.Millisecond
	// The command marks that it runs: killing the client between the grant
	// and the command's start would test a client that never handed the
	// lock on, which rightly releases it.
	running := filepath.Join(c.dir, "running")
	client := c.mcnode(0, "lock", "r", "--", "sh", "-c", `touch "$1"; exec sleep "$2"`, "sh", running, fmt.Sprint(work.Seconds()))
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(1, "the client has the lock", c.holding("r", -1, 0))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(running); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the locked command did not start")
		}
	}
	started := time.Now()
	_ = client.Process.Kill()
	_ = client.Wait()
	if out, err := c.mcnode(1, "lock", "--timeout", "10s", "r", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("lock not released after its command ended: %v: %s", err, out)
	}
	if took := time.Since(started); took < work-300*time.Millisecond {
		t.Fatalf("the lock moved on %v after its client was killed, while its command still ran", took)
	}
	t.Logf("lock moved on %v after kill -9 of its client, once the %v command ended", time.Since(started).Round(time.Millisecond), work)
}

// Without a daemon and without a group on the network, mcnode lock does not
// found one (where multicast is broken, every host would); --found does.
func TestE2ELockWithoutGroup(t *testing.T) {
	c := newCluster(t, 1, 0)
	out, err := c.mcnode(0, "lock", "x", "--", "true").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitNoGroup || !strings.Contains(string(out), "no member of group") {
		t.Fatalf("lock with no group: %v: %s", err, out)
	}
	// A timeout shorter than the wait for a group, with no member heard,
	// is no group too (status 4), not a lock someone holds (1, which it
	// was: a black-box round).
	out, err = c.mcnode(0, "lock", "--timeout", "200ms", "x", "--", "true").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != exitNoGroup || !strings.Contains(string(out), `no member of group "e2e" answered`) || !strings.Contains(string(out), "within --timeout 200ms") {
		t.Fatalf("lock with no group and a short timeout: %v: %s", err, out)
	}
	if out, err := c.mcnode(0, "lock", "--found", "x", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("lock --found: %v: %s", err, out)
	}
	// Its stderr closed (`... 2>&1 | head -c 1`), mcnode lock still
	// exits with the command's status: its log lines killed it with
	// SIGPIPE, status 141 in a shell (black-box round).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	lock := c.mcnode(0, "lock", "--found", "x", "--", "sh", "-c", "exit 5")
	lock.Stdout, lock.Stderr = w, w
	err = lock.Run()
	w.Close()
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("lock --found with its stderr closed: %v, want the command's status 5", err)
	}
}

// mcnode lock passes the command's exit status on and reports a timeout.
func TestE2ELockExitStatus(t *testing.T) {
	lockExitStatus(t, newCluster(t, 2, 2))
}

func TestE2EQuorumLockExitStatus(t *testing.T) {
	c := newQuorumCluster(t, 3, protocols.Maekawa, "fpp")
	lockExitStatus(t, c)
	// --no-daemon has no meaning in quorum mode, and says so.
	out, err := c.mcnode(0, "lock", "--no-daemon", "s", "--", "true").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "mcnode run --mode quorum") {
		t.Fatalf("--no-daemon in quorum mode: %v: %s", err, out)
	}
}

// lockExitStatus checks mcnode lock's exit statuses: COMMAND's own, and 1
// for a timeout or a held lock with --nonblock.
func lockExitStatus(t *testing.T, c *cluster) {
	t.Helper()
	err := c.mcnode(0, "lock", "s", "--", "sh", "-c", "exit 7").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("exit status: %v, want 7", err)
	}
	// A daemon of another group than the one asked for (--group, with the
	// daemon's socket given) refuses, lock and status alike, rather than
	// lock in a group the user did not ask for; the command learns the
	// group it holds the lock in.
	for _, args := range [][]string{{"lock", "-g", "other", "s", "--", "true"}, {"status", "-g", "other"}} {
		out, err := c.mcnode(0, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `this daemon serves group "e2e", not "other"`) {
			t.Errorf("mcnode %v at a daemon of group e2e: %v: %s", args, err, out)
		}
	}
	if out, err := c.mcnode(0, "lock", "s", "--", "sh", "-c", `echo "in $MCNODE_GROUP"`).CombinedOutput(); err != nil || !strings.Contains(string(out), "in e2e") {
		t.Errorf("MCNODE_GROUP of a command under a daemon's lock: %v: %s", err, out)
	}

	// A command that releases the lock itself, on descriptor 3, runs on
	// without it (it was taken for lost, and the command killed), and
	// mcnode lock exits with its status: host 1 takes the lock while it
	// runs, and only then lets it end.
	flag := filepath.Join(c.dir, "released-early")
	early := c.background(c.mcnode(0, "lock", "r", "--", "sh", "-c",
		`echo '{"op":"release"}' >&3; while [ ! -e "$1" ]; do sleep 0.05; done; exit 5`, "sh", flag))
	if out, err := c.mcnode(1, "lock", "--timeout", "20s", "r", "--", "touch", flag).CombinedOutput(); err != nil {
		_ = early.cmd.Process.Kill()
		<-early.done
		t.Fatalf("the lock its command released, from another host: %v: %s\nfirst: %s", err, out, early.out)
	}
	early.wantExit(t, 5, "a command that released its lock and ran on")
	holder := c.mcnode(0, "lock", "s", "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	c.waitStatus(0, "host 0 holding s", func(v *statusView) bool {
		return slices.ContainsFunc(v.Resources, func(r resourceView) bool { return r.Name == "s" && r.Holder == v.Self })
	})
	out, err := c.mcnode(1, "lock", "--timeout", "300ms", "s", "--", "true").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != exitNotAcquired || !strings.Contains(string(out), "timed out") {
		t.Fatalf("timeout: %v: %s", err, out)
	}
	out, err = c.mcnode(1, "lock", "--nonblock", "s", "--", "true").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != exitNotAcquired || !strings.Contains(string(out), "held or waited for by another client") {
		t.Fatalf("nonblock: %v: %s", err, out)
	}
}

// A host running lock commands without a daemon dies with them: four
// `mcnode lock` processes, one holding the lock and three queued for it,
// are killed at once (kill -9), and so is the server's daemon, on another
// host. The lockers joined as observers, since the group had three daemons
// to vote: two of its three voters are left, a majority, so the group takes
// over, removes the dead lockers once their leases ran out, and grants the
// lock. Had the lockers voted, five of seven members would be dead and the
// group would grant nothing, for good.
func TestE2ELockersDieTogetherWithTheServer(t *testing.T) {
	c := newCluster(t, 4, 3)
	var lockers []*exec.Cmd
	for range 4 {
		l := c.mcnode(3, "lock", "r", "--", "sleep", "60")
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, l)
		t.Cleanup(func() { _ = l.Process.Kill(); _ = l.Wait() })
	}
	v := c.waitStatus(0, "four observers from host 3, one holding r and three waiting", func(v *statusView) bool {
		observers := 0
		for _, m := range v.Members {
			if m.Observer && c.hostOf(v, m.ID) == 3 {
				observers++
			}
		}
		return observers == 4 && len(v.Members) == 7 && c.holding("r", 3, 3)(v)
	})
	srv := c.hostOf(v, v.Server)
	if srv < 0 || srv > 2 {
		t.Fatalf("the server, node %d, is on host %d: want a daemon's host", v.Server, srv)
	}
	for _, l := range lockers {
		_ = l.Process.Kill()
	}
	c.kill(srv)
	killed := time.Now()
	other := (srv + 1) % 3
	if out, err := c.mcnode(other, "lock", "--timeout", "20s", "r", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("no lock after the lockers and the server died: %v: %s", err, out)
	}
	t.Logf("kill -9 of four lockers (one holding r) and of the server: r granted again %v later", time.Since(killed).Round(time.Millisecond))
	c.waitStatus(other, "the two daemons left, with a quorum", func(v *statusView) bool { return len(v.Members) == 2 && v.QuorumHeld })
}

// TestE2EQuorumSizeStoppedTogether: --quorum-size daemons still finding
// their peers, stopped together by SIGTERM (a host's shutdown, systemd
// stopping a group), exit promptly: each waited for ever for the group to
// record its leave, which the other, leaving too, never did, and ignored
// every later signal (black-box round).
func TestE2EQuorumSizeStoppedTogether(t *testing.T) {
	const hosts = 2
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	c.env = func(int) []string {
		return []string{"MCNODE_MODE=quorum", "MCNODE_ALGO=maekawa", "MCNODE_QUORUM_SIZE=3"}
	}
	for i := range hosts {
		c.startDaemon(i)
		c.waitLog(i, "waiting for the multicast group")
	}
	exited := make(chan error, hosts)
	for i := range hosts {
		if err := c.daemons[i].Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		go func() { exited <- c.daemons[i].Wait() }()
	}
	deadline := time.After(leaveTimeout + 5*time.Second)
	for range hosts {
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("a daemon stopped by SIGTERM while finding its peers: %v, want status 0", err)
			}
		case <-deadline:
			t.Fatalf("the daemons, stopped together while finding their peers, still run %v after SIGTERM", leaveTimeout+5*time.Second)
		}
	}
}

// TestE2EQuorumSizeNodeComesBack: a --quorum-size daemon killed and started
// again takes its old place among the peers (the list the running nodes
// publish), where the membership gave it another address, and even a live
// node's index: its peers refused it as another setup for good (found by
// review). Maekawa on the tree, whose failure handling takes a node back
// as a new incarnation.
func TestE2EQuorumSizeNodeComesBack(t *testing.T) {
	const hosts = 3
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	c.env = func(int) []string {
		return []string{"MCNODE_MODE=quorum", "MCNODE_ALGO=maekawa", "MCNODE_COTERIE=tree", fmt.Sprintf("MCNODE_QUORUM_SIZE=%d", hosts)}
	}
	for i := range hosts {
		c.startDaemon(i)
		c.waitLog(i, "waiting for the multicast group")
	}
	before := make([]*statusView, hosts)
	for i := range hosts {
		before[i] = c.waitStatus(i, "peers from the group", func(v *statusView) bool { return len(v.Members) == hosts })
	}
	c.kill(0)
	c.startDaemon(0)
	v := c.waitStatus(0, "its old place taken again", func(v *statusView) bool { return len(v.Members) == hosts })
	if v.Self != before[0].Self || v.Members[v.Self].Addr != before[0].Members[before[0].Self].Addr {
		t.Fatalf("the restarted node is node %d at %s, was node %d at %s", v.Self, v.Members[v.Self].Addr, before[0].Self, before[0].Members[before[0].Self].Addr)
	}
	for i := range hosts {
		if out, err := c.mcnode(i, "lock", "--timeout", "30s", "x", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("host %d: mcnode lock after host 0 came back: %v: %s", i, err, out)
		}
	}
}
