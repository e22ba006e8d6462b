package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
)

// TestE2EChaosSoak is a randomized soak: five `mcnode run` daemons on a LAN
// of five network namespaces, lock loops on every host guarding one shared
// log file under the lock "shared" (and, at times, loops on some hosts under
// a second lock, "other", with critical sections of random length), and a
// random fault every 2 to 8 seconds, aimed at the server or a lock holder
// more often than not: kill -9 of a daemon (restarted 0-5 s later), of the
// server and its backup together, SIGSTOP of a daemon (0.2-3 s, or 4-6 s:
// past the lease), a 2|3 or 1|4 split of the network (1-8 s), a host that
// cannot hear or cannot be heard or whose link is down (1-8 s), a host whose
// link loses 10-50% of
// what it sends and of what it receives (2-10 s), kill -9 of a lock client in
// its critical section (or of its command). A minority of the hosts at most
// is down, stopped, cut off, on a bad link or still rejoining at once. The
// one-way and lossy links need nft (nftables); without it the soak says so
// and does without them.
// While a command whose mcnode lock was killed runs on (it holds the lock,
// flock(1)-style, and nothing stops it if the lease is lost: mcnode lock's
// watchdog died), no daemon fault is aimed at its host.
//
// It checks, as it goes and at the end: no two critical sections of a lock
// overlap and the fencing tokens increase (lockLoop.sections, the rule of
// the failover tests); after a fault, locks are entered again: no window of
// chaosStall without any critical section beginning; no daemon exits
// unless killed, none logs a panic, and no second group is founded; a host
// back from a fault is a member again within chaosRejoin; at the end all
// five share one view and every host's loop completes another lock. With no
// lock entered for chaosGiveUp the soak ends there, with every daemon's
// status.
//
// Run it with MCNODE_CHAOS=20m (the soak's length) as root. The seed
// (MCNODE_CHAOS_SEED, else from the clock) is logged first: it replays the
// same random draws, though not the cluster's own timing. On a failure the
// daemons' logs, the shared logs and the fault schedule are kept in
// /tmp/chaos-SEED/ (also on a pass with MCNODE_CHAOS_KEEP=1).
func TestE2EChaosSoak(t *testing.T) {
	spec := os.Getenv("MCNODE_CHAOS")
	if spec == "" {
		t.Skip("skipped: the chaos soak runs only with MCNODE_CHAOS set to its length (e.g. MCNODE_CHAOS=20m), as root")
	}
	soak, err := time.ParseDuration(spec)
	if err != nil || soak <= 0 {
		t.Fatalf("MCNODE_CHAOS=%q: want a positive duration such as 20m", spec)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MCNODE_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("MCNODE_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("chaos seed %d (replay: MCNODE_CHAOS_SEED=%d MCNODE_CHAOS=%v)", seed, seed, soak)
	if d, ok := t.Deadline(); ok {
		// The end (undoing the faults, the last locks, the cleanup) needs a
		// few minutes; a test killed by its -timeout leaves namespaces.
		if left := time.Until(d) - 5*time.Minute; left < soak {
			if left <= 0 {
				t.Fatalf("the -timeout leaves no time for a soak of %v: give it at least %v more", soak, soak+5*time.Minute)
			}
			t.Logf("the -timeout leaves %v for the soak, not %v", left.Round(time.Second), soak)
			soak = left
		}
	}

	x := &chaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		down: map[int]bool{}, stopped: map[int]bool{}, links: map[int]string{},
		recovering: map[int]time.Time{}, rejoinLate: map[int]bool{},
		orphans: map[int]int{}, counts: map[string]int{}, errorLines: map[string]int{},
		reported: map[int64]bool{}}
	x.c = &cluster{t: t, lan: netns.NewLAN(t, chaosHosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, chaosHosts)}
	x.otherDir = filepath.Join(x.c.dir, "other")
	if err := os.Mkdir(x.otherDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Critical sections of 5 to 150 work lines: some outlast a lease.
	x.other = newLockLoop(x.c, "other", x.otherDir, func() int { return 5 + rand.IntN(146) })
	x.start = time.Now()
	t.Cleanup(x.cleanup) // before the LAN and the directory are removed
	if err := netns.ImpairUnavailable(); err != nil {
		x.note("note", "no one-way or lossy links in this soak: %v", err)
	} else {
		x.linkFaults = true
	}
	for i := range chaosHosts {
		x.startDaemon(i)
		if i == 0 {
			x.c.waitMembers(0, 1) // the first founds; the rest join it
		}
	}
	for i := range chaosHosts {
		x.c.waitMembers(i, chaosHosts)
	}
	x.shared = startLockLoops(x.c, []int{0, 1, 2, 3, 4}, 5)
	waitLines(t, x.shared, 6)
	x.note("note", "five daemons, lock loops on every host: chaos begins")
	x.soak(soak)
	if !x.safetyBroken && !x.stuck {
		x.finish()
	}
}

const (
	chaosHosts      = 5
	chaosMinority   = 2                // at most this many hosts impaired at once
	chaosStall      = 15 * time.Second // the longest window with no lock entered
	chaosRejoin     = 30 * time.Second // the longest a host may take to be a member again
	chaosCheckEvery = 15 * time.Second
	chaosGiveUp     = 90 * time.Second // no lock entered for this long: the soak ends there
)

type chaosDaemon struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // once done is closed
	killed bool  // by the test
	inc    int
}

type chaosEvent struct {
	at   time.Time
	kind string // fault, undo, note, violation
	text string
}

type chaosPending struct {
	at   time.Time
	what string
	do   func()
}

// chaos is the soak's state; only the test's goroutine touches it, except
// where a field says otherwise.
type chaos struct {
	t        *testing.T
	c        *cluster
	seed     uint64
	rng      *rand.Rand
	start    time.Time
	daemons  [chaosHosts]*chaosDaemon
	incs     [chaosHosts]int
	shared   *lockLoop
	halted   bool
	otherDir string
	otherOn  [chaosHosts]bool // the host should run the "other" loop
	other    *lockLoop        // the loops on lock "other"

	down, stopped map[int]bool
	minority      []int             // the cut-off side of the current split
	links         map[int]string    // hosts whose link is down, one-way or lossy now: how
	linkFaults    bool              // nft is there to make links one-way or lossy
	recovering    map[int]time.Time // back from a fault, not yet seen in the group again: since when
	rejoinLate    map[int]bool
	orphans       map[int]int // pid of a command whose mcnode lock was killed: its host
	pending       []chaosPending
	events        []chaosEvent
	undos         []time.Time // restarts, SIGCONTs, heals
	undoChecked   int
	counts        map[string]int
	reported      map[int64]bool // stalls reported, by the start of the window
	lastEntry     int64
	maxGap        time.Duration
	maxGapAt      [2]int64        // when the longest window began and ended, Unix nanoseconds
	recoveries    []time.Duration // undo to the next lock entered
	rejoins       []time.Duration // undo to member again
	logOffsets    [chaosHosts]int64
	founded       int
	errorLines    map[string]int // error-level messages of the daemons, counted
	safetyBroken  bool
	stuck         bool // no lock entered for chaosGiveUp: the soak ends
}

func (x *chaos) since() time.Duration { return time.Since(x.start) }

// note records an event of the schedule, and logs it.
func (x *chaos) note(kind, format string, args ...any) {
	e := chaosEvent{at: time.Now(), kind: kind, text: fmt.Sprintf(format, args...)}
	x.events = append(x.events, e)
	x.t.Logf("%s", x.format(e))
}

func (x *chaos) format(e chaosEvent) string {
	return fmt.Sprintf("[%8.3fs %d] %-9s %s", e.at.Sub(x.start).Seconds(), e.at.UnixNano(), e.kind, e.text)
}

// violation fails the test, saying what broke and what came before.
func (x *chaos) violation(format string, args ...any) {
	x.t.Helper()
	x.note("violation", format, args...)
	x.t.Errorf("chaos seed %d: "+format, append([]any{x.seed}, args...)...)
}

// startDaemon starts host i's daemon; every incarnation logs to the same
// file, after a line that says which.
func (x *chaos) startDaemon(i int) {
	x.t.Helper()
	logf, err := os.OpenFile(filepath.Join(x.c.dir, fmt.Sprintf("daemon%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		x.t.Fatal(err)
	}
	fmt.Fprintf(logf, "{\"chaos\":\"host %d, incarnation %d, starts\",\"at_s\":%.3f}\n", i, x.incs[i], x.since().Seconds())
	cmd := x.c.mcnode(i, "run")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		x.t.Fatal(err)
	}
	d := &chaosDaemon{cmd: cmd, done: make(chan struct{}), inc: x.incs[i]}
	x.incs[i]++
	x.daemons[i] = d
	x.c.daemons[i] = cmd
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.done)
	}()
}

func (x *chaos) killDaemon(i int) {
	d := x.daemons[i]
	d.killed = true
	_ = d.cmd.Process.Kill()
	<-d.done
}

func (x *chaos) signal(i int, s syscall.Signal) {
	if err := x.daemons[i].cmd.Process.Signal(s); err != nil {
		x.t.Fatalf("%v to host %d's daemon: %v", s, i, err)
	}
}

// loopsOff stops host i's lock loops (their current lock runs to its end):
// a host whose daemon is dead would lock by joining the group itself.
func (x *chaos) loopsOff(i int) {
	x.shared.quiet(i)
	x.other.quiet(i)
}

// loopsOn starts host i's lock loops again, if stopped.
func (x *chaos) loopsOn(i int) {
	x.shared.ensure(i)
	if x.otherOn[i] {
		x.other.ensure(i)
	}
}

// impaired lists the hosts down, stopped, cut off, on a bad link or not yet
// back.
func (x *chaos) impaired() []int {
	var out []int
	for i := range chaosHosts {
		if x.faulted(i) || !x.recovering[i].IsZero() {
			out = append(out, i)
		}
	}
	return out
}

// faulted reports whether a fault is on host i now: its daemon down or
// stopped, the host cut off or on a bad link.
func (x *chaos) faulted(i int) bool {
	_, link := x.links[i]
	return x.down[i] || x.stopped[i] || slices.Contains(x.minority, i) || link
}

func (x *chaos) healthy() []int {
	var out []int
	for i := range chaosHosts {
		if !slices.Contains(x.impaired(), i) {
			out = append(out, i)
		}
	}
	return out
}

// roles asks a healthy host for the server, its backup and the holders of
// the locks (-1: unknown).
func (x *chaos) roles() (server, backup int, holders []int) {
	h := x.healthy()
	if len(h) == 0 {
		return -1, -1, nil
	}
	v, err := x.c.status(h[x.rng.IntN(len(h))])
	if err != nil {
		return -1, -1, nil
	}
	server, backup = -1, -1
	if v.Server != 0 {
		server = x.c.hostOf(v, v.Server)
	}
	if v.Backup != 0 {
		backup = x.c.hostOf(v, v.Backup)
	}
	for _, r := range v.Resources {
		if r.Holder != 0 {
			if k := x.c.hostOf(v, r.Holder); k >= 0 && !slices.Contains(holders, k) {
				holders = append(holders, k)
			}
		}
	}
	return server, backup, holders
}

// after schedules an undo.
func (x *chaos) after(d time.Duration, what string, do func()) {
	x.pending = append(x.pending, chaosPending{at: time.Now().Add(d), what: what, do: do})
}

func (x *chaos) runDue(all bool) {
	for {
		k := -1
		for j, p := range x.pending {
			if (all || !time.Now().Before(p.at)) && (k < 0 || p.at.Before(x.pending[k].at)) {
				k = j
			}
		}
		if k < 0 {
			return
		}
		p := x.pending[k]
		x.pending = slices.Delete(x.pending, k, k+1)
		p.do()
	}
}

func (x *chaos) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(x.rng.Int64N(int64(hi-lo)+1))
}

func (x *chaos) back(i int) {
	x.recovering[i] = time.Now()
}

func (x *chaos) undone() {
	x.undos = append(x.undos, time.Now())
}

// fault does one random fault, aimed at the server or a holder most of the
// time, and schedules its undo.
func (x *chaos) fault() {
	server, backup, holders := x.roles()
	dangerous := x.rng.Float64() < 0.6
	target := -1
	var aim string
	if dangerous {
		switch {
		case server >= 0 && (len(holders) == 0 || x.rng.IntN(2) == 0):
			target, aim = server, "the server"
		case len(holders) > 0:
			target, aim = holders[x.rng.IntN(len(holders))], "a holder"
		}
	}
	if target < 0 {
		target, aim = x.rng.IntN(chaosHosts), "a random host"
	}
	imp := x.impaired()
	ok := func(i int) bool {
		_, orphan := x.orphanHost(i)
		return i >= 0 && !slices.Contains(imp, i) && len(imp)+1 <= chaosMinority && !orphan
	}
	if !ok(target) {
		for _, i := range x.rng.Perm(chaosHosts) {
			if ok(i) {
				target, aim = i, fmt.Sprintf("a random host (%s, host %d, is impaired)", aim, target)
				break
			}
		}
	}
	switch k := x.rng.IntN(100); {
	case k < 20: // kill -9, restart 0-5 s later
		if !ok(target) {
			x.killClient(holders)
			return
		}
		x.loopsOff(target)
		x.killDaemon(target)
		x.down[target] = true
		d := x.dur(0, 5*time.Second)
		x.counts["kill"]++
		x.note("fault", "kill -9 of host %d's daemon (%s; server %d, backup %d, holders %v), restart in %v", target, aim, server, backup, holders, d.Round(time.Millisecond))
		i := target
		x.after(d, "restart", func() { x.restart(i) })
	case k < 40: // SIGSTOP, SIGCONT later
		if !ok(target) {
			x.killClient(holders)
			return
		}
		d := x.dur(200*time.Millisecond, 3*time.Second)
		if x.rng.IntN(4) == 0 {
			d = x.dur(4*time.Second, 6*time.Second) // past the lease
		}
		x.signal(target, syscall.SIGSTOP)
		x.stopped[target] = true
		x.counts["stop"]++
		x.note("fault", "SIGSTOP of host %d's daemon (%s; server %d, backup %d, holders %v) for %v", target, aim, server, backup, holders, d.Round(time.Millisecond))
		i := target
		x.after(d, "SIGCONT", func() {
			x.signal(i, syscall.SIGCONT)
			delete(x.stopped, i)
			x.back(i)
			x.undone()
			x.note("undo", "SIGCONT of host %d's daemon", i)
		})
	case k < 60: // a split, healed later
		if x.minority != nil {
			x.killClient(holders)
			return
		}
		size := 1 + x.rng.IntN(2)
		var side []int
		for i := range chaosHosts { // the impaired must be on the minority side
			if slices.Contains(imp, i) {
				side = append(side, i)
			}
		}
		add := func(i int) {
			if _, orphan := x.orphanHost(i); i >= 0 && len(side) < size && !slices.Contains(side, i) && !orphan {
				side = append(side, i)
			}
		}
		if dangerous {
			add(server)
			if len(holders) > 0 {
				add(holders[x.rng.IntN(len(holders))])
			}
		}
		for _, i := range x.rng.Perm(chaosHosts) {
			add(i)
		}
		if len(side) > chaosMinority || len(side) == 0 {
			x.killClient(holders)
			return
		}
		slices.Sort(side)
		var rest []int
		for i := range chaosHosts {
			if !slices.Contains(side, i) {
				rest = append(rest, i)
			}
		}
		d := x.dur(time.Second, 8*time.Second)
		x.c.lan.Partition(x.t, side, rest)
		x.minority = side
		x.counts[fmt.Sprintf("split %d|%d", len(side), len(rest))]++
		x.note("fault", "split %v | %v (server %d on the %s side; backup %d, holders %v) for %v", side, rest, server,
			map[bool]string{true: "minority", false: "majority"}[slices.Contains(side, server)], backup, holders, d.Round(time.Millisecond))
		x.after(d, "heal", func() {
			x.c.lan.Heal(x.t)
			for _, i := range x.minority {
				if !x.down[i] {
					x.back(i)
				}
			}
			x.minority = nil
			x.undone()
			x.note("undo", "heal")
		})
	case k < 78: // a one-way or lossy link, repaired later
		if !ok(target) {
			x.killClient(holders)
			return
		}
		i := target
		d := x.dur(time.Second, 8*time.Second)
		var what string
		repair := func() { x.c.lan.Impair(x.t, i, netns.Impairment{}) }
		v := x.rng.IntN(4)
		if !x.linkFaults {
			v = 2 // the one link fault that needs no nft
		}
		switch v {
		case 0:
			x.c.lan.Impair(x.t, i, netns.Impairment{In: 100})
			what = "hears nothing"
			x.counts["one-way link"]++
		case 1:
			x.c.lan.Impair(x.t, i, netns.Impairment{Out: 100})
			what = "is heard by nobody"
			x.counts["one-way link"]++
		case 2:
			x.c.lan.SetLink(x.t, i, false)
			repair = func() { x.c.lan.SetLink(x.t, i, true) }
			what = "has its link down"
			x.counts["link down"]++
		default:
			imp := netns.Impairment{In: 10 + x.rng.IntN(41), Out: 10 + x.rng.IntN(41)}
			x.c.lan.Impair(x.t, i, imp)
			what = fmt.Sprintf("loses %d%% of what it receives and %d%% of what it sends", imp.In, imp.Out)
			d = x.dur(2*time.Second, 10*time.Second)
			x.counts["lossy link"]++
		}
		x.links[i] = what
		x.note("fault", "host %d (%s; server %d, backup %d, holders %v) %s for %v", i, aim, server, backup, holders, what, d.Round(time.Millisecond))
		x.after(d, "repair", func() {
			repair()
			delete(x.links, i)
			if !x.down[i] {
				x.back(i)
			}
			x.undone()
			x.note("undo", "host %d's link repaired", i)
		})
	case k < 88: // the server and its backup together
		if len(imp) > 0 || server < 0 || backup < 0 || server == backup || !ok(server) || !ok(backup) {
			x.killClient(holders)
			return
		}
		x.counts["kill server+backup"]++
		for _, i := range []int{server, backup} {
			x.loopsOff(i)
			x.killDaemon(i)
			x.down[i] = true
		}
		d1, d2 := x.dur(0, 5*time.Second), x.dur(0, 5*time.Second)
		x.note("fault", "kill -9 of the server (host %d) and its backup (host %d) (holders %v), restarts in %v and %v", server, backup, holders, d1.Round(time.Millisecond), d2.Round(time.Millisecond))
		s, b := server, backup
		x.after(d1, "restart", func() { x.restart(s) })
		x.after(d2, "restart", func() { x.restart(b) })
	default:
		x.killClient(holders)
	}
}

func (x *chaos) restart(i int) {
	x.startDaemon(i)
	delete(x.down, i)
	x.back(i)
	x.undone()
	x.note("undo", "restart of host %d's daemon (incarnation %d)", i, x.daemons[i].inc)
}

// lockProc is a critical section's command as /proc shows it.
type lockProc struct {
	pid, ppid, host int
	lock            string
}

// inCritical lists the commands of the lock loops that are in their
// critical section, and whose mcnode lock still runs (or, with orphans,
// every one).
func (x *chaos) inCritical() []lockProc {
	ents, _ := os.ReadDir("/proc")
	var out []lockProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args := procArgs(pid)
		if len(args) != 7 || args[0] != "sh" || args[1] != "-c" || args[2] != critical || args[3] != "sh" {
			continue
		}
		lock := ""
		switch args[4] {
		case x.c.dir:
			lock = "shared"
		case x.otherDir:
			lock = "other"
		default:
			continue
		}
		host, err := strconv.Atoi(args[5])
		if err != nil {
			continue
		}
		ppid := procPPID(pid)
		if pa := procArgs(ppid); len(pa) < 2 || pa[0] != os.Args[0] || pa[1] != "lock" {
			continue // a subshell of the command, or an orphan
		}
		out = append(out, lockProc{pid: pid, ppid: ppid, host: host, lock: lock})
	}
	return out
}

func procArgs(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

func procPPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 2 {
		return -1
	}
	ppid, _ := strconv.Atoi(fs[1])
	return ppid
}

// orphanHost reports whether a command whose mcnode lock was killed still
// runs on host i: nothing stops it if its lease is lost (mcnode lock's
// watchdog died with it), so no daemon fault is aimed at its host meanwhile.
func (x *chaos) orphanHost(i int) (int, bool) {
	for pid, h := range x.orphans {
		if h == i {
			return pid, true
		}
	}
	return 0, false
}

func (x *chaos) reapOrphans() {
	for pid := range x.orphans {
		if err := syscall.Kill(pid, 0); err != nil {
			delete(x.orphans, pid)
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			s := string(b)
			if fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(fs) > 0 && fs[0] == "Z" {
				delete(x.orphans, pid)
			}
		}
	}
}

// killClient kills, with SIGKILL, a lock client in its critical section (a
// holder's if it can): either mcnode lock itself, whose command then runs
// on, holding the lock (flock(1) semantics), or the command's process group.
func (x *chaos) killClient(holders []int) {
	procs := x.inCritical()
	if len(procs) == 0 {
		x.note("note", "no fault this time: none fits the impaired hosts %v, and no lock client is in its critical section", x.impaired())
		return
	}
	p := procs[x.rng.IntN(len(procs))]
	for _, q := range x.rng.Perm(len(procs)) {
		if slices.Contains(holders, procs[q].host) {
			p = procs[q]
			break
		}
	}
	if x.rng.IntN(2) == 0 {
		if err := syscall.Kill(p.ppid, syscall.SIGKILL); err != nil {
			x.note("note", "kill -9 of host %d's mcnode lock %q (pid %d): %v", p.host, p.lock, p.ppid, err)
			return
		}
		x.orphans[p.pid] = p.host
		x.counts["kill client"]++
		x.note("fault", "kill -9 of host %d's mcnode lock %q (pid %d) in its critical section: its command (pid %d) runs on", p.host, p.lock, p.ppid, p.pid)
		return
	}
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil {
		x.note("note", "kill -9 of host %d's %q command (process group %d): %v", p.host, p.lock, p.pid, err)
		return
	}
	x.counts["kill command"]++
	x.note("fault", "kill -9 of host %d's %q command (process group %d) in its critical section", p.host, p.lock, p.pid)
}

// toggleOther starts the "other" loops on 2 to 4 random hosts, or stops
// them.
func (x *chaos) toggleOther() {
	if slices.Contains(x.otherOn[:], true) {
		for i := range chaosHosts {
			x.otherOn[i] = false
			x.other.quiet(i)
		}
		x.note("note", "the loops on lock \"other\" stop")
		return
	}
	hosts := x.rng.Perm(chaosHosts)[:2+x.rng.IntN(3)]
	slices.Sort(hosts)
	for _, i := range hosts {
		x.otherOn[i] = true
		if !slices.Contains(x.impaired(), i) {
			x.other.ensure(i)
		}
	}
	x.note("note", "loops on lock \"other\" start on hosts %v", hosts)
}

// checkDaemons reports a daemon that exited without being killed, and
// starts it again.
func (x *chaos) checkDaemons() {
	for i, d := range x.daemons {
		if d == nil || d.killed {
			continue
		}
		select {
		case <-d.done:
			x.violation("host %d's daemon (incarnation %d) exited by itself: %v (its log: daemon%d.log)", i, d.inc, d.err, i)
			delete(x.stopped, i)
			x.restart(i)
		default:
		}
	}
}

// checkRecovering moves the hosts back in the group (five members, this
// host one, a majority reached) out of the impaired set, and reports one
// not back within chaosRejoin.
func (x *chaos) checkRecovering() {
	for i, since := range x.recovering {
		if x.faulted(i) {
			continue
		}
		v, err := x.c.status(i)
		if err == nil && v.QuorumHeld && x.fullView(v) {
			delete(x.recovering, i)
			delete(x.rejoinLate, i)
			x.rejoins = append(x.rejoins, time.Since(since))
			x.loopsOn(i)
			continue
		}
		if time.Since(since) > chaosRejoin && !x.rejoinLate[i] {
			x.rejoinLate[i] = true
			b, _ := json.Marshal(v)
			x.violation("host %d is not back in the group %v after its fault ended: status %s, %v", i, chaosRejoin, b, err)
		}
	}
}

// fullView reports whether v lists five members, one on each host.
func (x *chaos) fullView(v *statusView) bool {
	if len(v.Members) != chaosHosts {
		return false
	}
	seen := map[int]bool{}
	for _, m := range v.Members {
		seen[x.c.hostOf(v, m.ID)] = true
	}
	return len(seen) == chaosHosts && !seen[-1]
}

// check runs the failover tests' overlap and fencing check on both logs,
// then the progress check and the daemons' logs. It returns false once
// mutual exclusion is broken.
func (x *chaos) check() bool {
	var secs []section
	ok := x.t.Run(fmt.Sprintf("check-at-%ds", int(x.since().Seconds())), func(t *testing.T) {
		secs = x.shared.sections(t)
		if _, err := os.Stat(filepath.Join(x.otherDir, "log")); err == nil {
			secs = append(secs, x.other.sections(t)...)
		}
	})
	if !ok {
		x.safetyBroken = true
		x.violation("mutual exclusion or fencing broken: see the failed check above")
		return false
	}
	x.progress(secs)
	x.scanLogs()
	return true
}

// eventsAround formats the events of the schedule from 10 s before a
// window with no lock entered to its end: the faults that may explain it.
func (x *chaos) eventsAround(from, to int64) []string {
	var around []string
	for _, e := range x.events {
		if n := e.at.UnixNano(); n >= from-int64(10*time.Second) && n <= to {
			around = append(around, x.format(e))
		}
	}
	return around
}

// progress reports every window longer than chaosStall in which no lock
// was entered, with the events around it, and times each undo to the next
// lock entered.
func (x *chaos) progress(secs []section) {
	starts := make([]int64, 0, len(secs))
	for _, s := range secs {
		starts = append(starts, s.first)
	}
	slices.Sort(starts)
	if len(starts) == 0 {
		return
	}
	now := time.Now().UnixNano()
	stall := func(from, to int64, open bool) {
		gap := time.Duration(to - from)
		if gap <= chaosStall || x.reported[from] {
			return
		}
		x.reported[from] = true
		around := x.eventsAround(from, to)
		state := "ended"
		if open {
			state = "still open"
		}
		x.violation("no lock entered for %v (%s), from %d to %d, impaired now %v; the events around it:\n\t%s",
			gap.Round(time.Millisecond), state, from, to, x.impaired(), strings.Join(around, "\n\t"))
	}
	for k := 1; k < len(starts); k++ {
		if starts[k] > x.lastEntry {
			if gap := time.Duration(starts[k] - starts[k-1]); gap > x.maxGap {
				x.maxGap, x.maxGapAt = gap, [2]int64{starts[k-1], starts[k]}
			}
			stall(starts[k-1], starts[k], false)
		}
	}
	x.lastEntry = starts[len(starts)-1]
	stall(x.lastEntry, now, true)
	if time.Duration(now-x.lastEntry) > chaosGiveUp {
		x.stuck = true
	}
	for ; x.undoChecked < len(x.undos); x.undoChecked++ {
		u := x.undos[x.undoChecked].UnixNano()
		k := sort.Search(len(starts), func(k int) bool { return starts[k] > u })
		if k == len(starts) {
			break // not yet: the stall check reports a long wait
		}
		x.recoveries = append(x.recoveries, time.Duration(starts[k]-u))
	}
}

// scanLogs reads what the daemons logged since the last scan: a panic, a
// fatal error, a data race, a second group founded or heard are
// violations; error-level messages are counted for the summary.
func (x *chaos) scanLogs() {
	for i := range chaosHosts {
		f, err := os.Open(filepath.Join(x.c.dir, fmt.Sprintf("daemon%d.log", i)))
		if err != nil {
			continue
		}
		if _, err := f.Seek(x.logOffsets[i], io.SeekStart); err != nil {
			f.Close()
			continue
		}
		r := bufio.NewReader(f)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break // a partial line is read again next time
			}
			x.logOffsets[i] += int64(len(line))
			switch {
			case strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"), strings.Contains(line, "WARNING: DATA RACE"),
				strings.Contains(line, `"level":"panic"`), strings.Contains(line, `"level":"fatal"`):
				x.violation("host %d's daemon: %s", i, strings.TrimSpace(line))
			case strings.Contains(line, "another run of this group is on the network"):
				x.violation("host %d's daemon hears a second group: %s", i, strings.TrimSpace(line))
			case strings.Contains(line, "founded the group"):
				x.founded++
				if x.founded > 1 {
					x.violation("host %d's daemon founded a group, not the first to: %s", i, strings.TrimSpace(line))
				}
			}
			if strings.Contains(line, `"level":"error"`) {
				var m struct {
					Message string `json:"message"`
				}
				if json.Unmarshal([]byte(line), &m) == nil {
					x.errorLines[m.Message]++
				}
			}
		}
		f.Close()
	}
}

// soak runs the faults until the soak's time is up or mutual exclusion
// broke.
func (x *chaos) soak(d time.Duration) {
	end := time.Now().Add(d)
	nextFault := time.Now().Add(x.dur(2*time.Second, 8*time.Second))
	nextOther := time.Now().Add(x.dur(20*time.Second, 60*time.Second))
	nextCheck := time.Now().Add(chaosCheckEvery)
	lastRecovering := time.Time{}
	for time.Now().Before(end) {
		x.runDue(false)
		x.checkDaemons()
		if time.Since(lastRecovering) > 100*time.Millisecond {
			x.checkRecovering()
			lastRecovering = time.Now()
		}
		x.reapOrphans()
		if time.Now().After(nextFault) {
			x.fault()
			nextFault = time.Now().Add(x.dur(2*time.Second, 8*time.Second))
		}
		if time.Now().After(nextOther) {
			x.toggleOther()
			nextOther = time.Now().Add(x.dur(30*time.Second, 90*time.Second))
		}
		if time.Now().After(nextCheck) {
			if !x.check() {
				return
			}
			if x.stuck {
				x.violation("no lock entered for more than %v: the soak ends here; the daemons' status:\n\t%s", chaosGiveUp, strings.Join(x.statuses(), "\n\t"))
				return
			}
			nextCheck = time.Now().Add(chaosCheckEvery)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statuses returns what every host's daemon says of itself and the group.
func (x *chaos) statuses() []string {
	var out []string
	for i := range chaosHosts {
		if x.stopped[i] {
			out = append(out, fmt.Sprintf("host %d: stopped (SIGSTOP)", i))
			continue
		}
		v, err := x.c.status(i)
		if err != nil {
			out = append(out, fmt.Sprintf("host %d: %v", i, err))
			continue
		}
		b, _ := json.Marshal(struct {
			Self, T, Server, Epoch, Backup, Claiming uint64
			Quorum                                   string
			Members                                  []memberView
		}{v.Self, v.T, v.Server, v.Epoch, v.Backup, v.Claiming, v.QuorumText, v.Members})
		out = append(out, fmt.Sprintf("host %d: %s", i, b))
	}
	return out
}

// finish undoes every fault, waits until all five daemons share one view,
// has every host's loop complete another lock, and checks the logs a last
// time.
func (x *chaos) finish() {
	t := x.t
	x.note("note", "soak over: every fault undone")
	x.runDue(true)
	x.checkDaemons()
	deadline := time.Now().Add(60 * time.Second)
	for len(x.recovering) > 0 && time.Now().Before(deadline) {
		x.checkRecovering()
		time.Sleep(100 * time.Millisecond)
	}
	if len(x.recovering) > 0 {
		x.violation("hosts %v not back in the group 60 s after the soak", slices.Sorted(maps.Keys(x.recovering)))
	}
	var epochs []uint64
	for i := range chaosHosts {
		v := x.c.waitStatus(i, "five members, a majority", func(v *statusView) bool { return v.QuorumHeld && x.fullView(v) })
		epochs = append(epochs, v.Epoch)
	}
	if len(slices.Compact(slices.Clone(epochs))) != 1 {
		// The epoch may move between two questions; ask once more.
		time.Sleep(time.Second)
		epochs = epochs[:0]
		for i := range chaosHosts {
			v, err := x.c.status(i)
			if err != nil {
				t.Fatal(err)
			}
			epochs = append(epochs, v.Epoch)
		}
		if len(slices.Compact(slices.Clone(epochs))) != 1 {
			x.violation("after the soak the daemons are in epochs %v", epochs)
		}
	}
	for i := range chaosHosts {
		x.loopsOn(i)
	}
	at := time.Now()
	waitSectionsAfter(t, x.shared, []int{0, 1, 2, 3, 4}, at, 60*time.Second, "after the soak")
	x.halt()
	if !x.check() {
		return
	}
	ss := x.shared.sections(t)
	for h := range chaosHosts {
		if !slices.ContainsFunc(ss, func(s section) bool { return s.host == h && s.first > at.UnixNano() && s.ended }) {
			x.violation("host %d's lock loop completed no lock after the soak", h)
		}
	}
	x.summary(ss)
}

// summary logs what the soak did and saw.
func (x *chaos) summary(shared []section) {
	t := x.t
	var other []section
	if _, err := os.Stat(filepath.Join(x.otherDir, "log")); err == nil {
		other = x.other.sections(t)
	}
	per := make([]int, chaosHosts)
	for _, s := range shared {
		per[s.host]++
	}
	t.Logf("chaos seed %d: %v of soak, faults %v", x.seed, x.since().Round(time.Second), x.counts)
	t.Logf("critical sections: %d on \"shared\" (per host %v), %d on \"other\"; longest window with no lock entered %v",
		len(shared), per, len(other), x.maxGap.Round(time.Millisecond))
	if x.maxGap > 0 {
		// Within the bound, but the faults behind the longest wait are
		// worth reading when it grows from one soak to the next.
		t.Logf("the longest window, from %.3fs to %.3fs of the soak, and the events from 10 s before it:\n\t%s",
			time.Duration(x.maxGapAt[0]-x.start.UnixNano()).Seconds(), time.Duration(x.maxGapAt[1]-x.start.UnixNano()).Seconds(),
			strings.Join(x.eventsAround(x.maxGapAt[0], x.maxGapAt[1]), "\n\t"))
	}
	q := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "none"
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("%d, median %v, p90 %v, max %v", len(s), s[len(s)/2].Round(time.Millisecond),
			s[len(s)*9/10].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	t.Logf("undo to the next lock entered: %s", q(x.recoveries))
	t.Logf("undo to member again: %s", q(x.rejoins))
	type kv struct {
		msg string
		n   int
	}
	var errs []kv
	for m, n := range x.errorLines {
		errs = append(errs, kv{m, n})
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].n > errs[j].n })
	for _, e := range errs {
		t.Logf("daemons logged %5d times (error): %s", e.n, e.msg)
	}
}

// halt stops both lock loops, once, and reports their clients that never
// ended.
func (x *chaos) halt() {
	if x.halted || x.shared == nil {
		return
	}
	x.halted = true
	x.other.halt(x.t)
	x.shared.halt(x.t)
}

// cleanup stops everything the soak started, before the LAN and the
// directory go; on a failure (or with MCNODE_CHAOS_KEEP) it keeps the logs
// and prints the seed and the fault schedule.
func (x *chaos) cleanup() {
	t := x.t
	for i, d := range x.daemons {
		if d != nil {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-d.done:
			default:
				x.killDaemon(i)
			}
		}
	}
	x.halt()
	if !t.Failed() && os.Getenv("MCNODE_CHAOS_KEEP") == "" {
		return
	}
	keep := fmt.Sprintf("/tmp/chaos-%d", x.seed)
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Logf("cannot keep the logs: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(x.c.dir, "daemon*.log"))
	for _, f := range files {
		copyFile(t, f, filepath.Join(keep, filepath.Base(f)))
	}
	copyFile(t, filepath.Join(x.c.dir, "log"), filepath.Join(keep, "shared.log"))
	copyFile(t, filepath.Join(x.otherDir, "log"), filepath.Join(keep, "other.log"))
	var sched strings.Builder
	for _, e := range x.events {
		sched.WriteString(x.format(e) + "\n")
	}
	if x.shared != nil {
		sched.WriteString("\nlock loop errors:\n")
		for _, e := range x.shared.errs {
			sched.WriteString(e + "\n")
		}
	}
	_ = os.WriteFile(filepath.Join(keep, "schedule.txt"), []byte(sched.String()), 0o644)
	if t.Failed() {
		t.Logf("chaos seed %d FAILED (replay: MCNODE_CHAOS_SEED=%d); logs kept in %s; the fault schedule:\n%s", x.seed, x.seed, keep, sched.String())
	} else {
		t.Logf("chaos seed %d: logs kept in %s", x.seed, keep)
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			t.Logf("keeping %s: %v", from, err)
		}
		return
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Logf("keeping %s: %v", from, err)
	}
}
