package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/atomicfile"
	"github.com/mcnode/mcnode/internal/boottime"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/coterie"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/seal"
)

// The two modes a node runs in.
const (
	modeMulticast = "multicast"
	modeQuorum    = "quorum"
)

// modeFlags choose between the rotating arbiter over multicast and the
// quorum protocols over TCP.
func modeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mode", Value: modeMulticast, EnvVars: []string{"MCNODE_MODE"},
			Usage: "multicast (the rotating arbiter) or quorum (a point-to-point protocol over TCP, for comparison)"},
		&cli.StringFlag{Name: "algo", Value: protocols.Maekawa, EnvVars: []string{"MCNODE_ALGO"},
			Usage: "quorum mode: " + strings.Join(protocols.Names(), ", ")},
		&cli.StringFlag{Name: "coterie", Value: "fpp", EnvVars: []string{"MCNODE_COTERIE"},
			Usage: "quorum mode, for maekawa, cao-singhal and kakugawa: " + strings.Join(coterie.Kinds(), ", ")},
		&cli.StringFlag{Name: "peers", EnvVars: []string{"MCNODE_PEERS"},
			Usage: "quorum mode: every node's TCP address host:port, comma-separated, the same list in the same order on every node (nodes given different lists refuse each other)"},
		&cli.IntFlag{Name: "node-id", Value: -1, EnvVars: []string{"MCNODE_NODE_ID"},
			Usage: "quorum mode: this node's position in --peers, counting from 0"},
		&cli.StringFlag{Name: "listen", EnvVars: []string{"MCNODE_LISTEN"},
			Usage: "quorum mode with --peers: the host:port this node listens on, when the others reach it at the address --peers gives through a NAT or a container's port mapping (default: that address)"},
		&cli.IntFlag{Name: "quorum-size", EnvVars: []string{"MCNODE_QUORUM_SIZE"},
			Usage: "quorum mode without --peers: join the multicast group, wait until it has this many members, and use the first that many (by member ID) as the peers, each at its group address over TCP"},
	}
}

// quorumOnly are the flags that mean nothing in multicast mode.
var quorumOnly = []string{"algo", "coterie", "peers", "node-id", "quorum-size", "listen"}

// mode returns the --mode, checked, and refuses quorum-mode flags without
// it: forgetting --mode quorum must not quietly run the multicast arbiter.
func mode(c *cli.Context) (string, error) {
	switch m := c.String("mode"); m {
	case modeQuorum:
		return m, nil
	case modeMulticast:
		for _, f := range quorumOnly {
			if c.IsSet(f) {
				return "", usage("--%s applies to quorum mode only: add --mode quorum (or set MCNODE_MODE=quorum)", f)
			}
		}
		return m, nil
	default:
		return "", usage("--mode %q: want multicast or quorum", m)
	}
}

// multicastOnly are the flags that mean nothing to a quorum-mode node given
// its --peers: they set up the multicast group, which such a node does not
// join (with --quorum-size it does, to find its peers, and takes them all).
var multicastOnly = []string{"address", "interface", "bind", "ttl", "tick", "turn-length", "turn-timeout", "max-members",
	"retry", "heartbeat", "takeover-timeout", "join-timeout", "rate-limit", "found"}

// recordMode writes the mode this host's daemon of the group runs in to
// its state file GROUP.mode (timestamp is its GROUP.timestamp, "" for
// none) once its node has started: a lock client that finds no daemon to
// ask must not join the multicast group of a host whose group runs in
// quorum mode (daemonModeOf). Not before: a command line refused later
// would leave the host marked.
func recordMode(timestamp, mode string, log zerolog.Logger) {
	if timestamp == "" {
		return
	}
	base := strings.TrimSuffix(timestamp, ".timestamp")
	if err := atomicfile.Write(base+".mode", []byte(mode+"\n")); err != nil {
		log.Warn().Err(err).Str("file", base+".mode").Msg("cannot record the daemon's mode: a lock client that finds no daemon cannot tell it")
	}
}

// checkCoterie refuses a --coterie typed for a protocol that has none
// (run, demo and game alike: the last two took it silently).
func checkCoterie(c *cli.Context) error {
	if algo := c.String("algo"); slices.Contains(protocols.Names(), algo) && !protocols.UsesCoterie(algo) && onCommandLine(c, "coterie") {
		return usage("--coterie applies to maekawa, cao-singhal and kakugawa only, not to %s: drop --coterie", algo)
	}
	return nil
}

// quorumConfig builds a quorum-mode node's config from the flags.
func quorumConfig(c *cli.Context, log zerolog.Logger) (node.Config, error) {
	// Typed ones only: an MCNODE_ variable exported for this host's
	// multicast daemons must not stop a quorum node its user started.
	if f := typedOf(c, multicastOnly...); c.String("peers") != "" && f != "" {
		return node.Config{}, usage("--%s applies to the multicast group, which a quorum node given --peers does not join: drop --%s (with --quorum-size instead of --peers the node finds its peers in that group, and takes it)", f, f)
	}
	if err := checkCoterie(c); err != nil {
		return node.Config{}, err
	}
	cfg := node.Config{Group: c.String("group"), Protocol: c.String("algo"), Coterie: c.String("coterie"),
		Self: c.Int("node-id"), Logger: log,
		// The failure handling's leases (Maekawa, Cao-Singhal), as multicast mode's.
		Lease: c.Duration("lease"), LeaseMargin: c.Duration("lease-margin")}
	// Checked here, as multicast mode's group.Config.Validate does: the
	// node would refuse them only once started, and not as a usage error.
	for _, f := range []string{"lease", "lease-margin"} {
		if d := c.Duration(f); d < 0 {
			return cfg, usage("--%s %v is negative: give a duration (0 for the default)", f, d)
		}
	}
	// The links are TLS, authenticated by the key.
	var err error
	if cfg.Keys, err = keyfileKeys(c); err != nil {
		return cfg, err
	}
	for _, p := range strings.Split(c.String("peers"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	if size := c.Int("quorum-size"); len(cfg.Peers) == 0 && size > 0 {
		if c.IsSet("listen") {
			return cfg, usage("--listen goes with --peers: with --quorum-size each node listens at its group address")
		}
		// The peers will come from the multicast group's membership
		// (peersFromGroup); check what can be checked now.
		cfg.Peers, cfg.Self = make([]string, size), 0
		if err := cfg.Setup().Validate(); err != nil {
			return cfg, setupError(err)
		}
		return cfg, leaseFlags(c, cfg)
	}
	seen := map[string]int{}
	for i, p := range cfg.Peers {
		if j, dup := seen[p]; dup {
			return cfg, usage("--peers lists %s twice (nodes %d and %d): every node needs its own address", p, j, i)
		}
		seen[p] = i
	}
	switch {
	case len(cfg.Peers) > 0 && c.IsSet("quorum-size"):
		return cfg, usage("--peers and --quorum-size both name the peers: give one (--peers lists them, --quorum-size takes them from the multicast group)")
	case c.Int("quorum-size") < 0:
		return cfg, usage("--quorum-size %d: want a positive number of nodes", c.Int("quorum-size"))
	case len(cfg.Peers) == 0:
		return cfg, usage("quorum mode needs --peers (every node's host:port, the same list on every node) or --quorum-size (take the peers from the multicast group)")
	case cfg.Self < 0 || cfg.Self >= len(cfg.Peers):
		return cfg, usage("--node-id %d: want this node's position in --peers, 0 to %d", cfg.Self, len(cfg.Peers)-1)
	}
	if err := cfg.Setup().Validate(); err != nil {
		return cfg, setupError(err)
	}
	for i, p := range cfg.Peers {
		if err := qnet.CheckPeers([]string{p}); err != nil {
			return cfg, usage("--peers: node %d's address %q: want host:port (a host others can dial, a port in 1-65535)", i, p)
		}
	}
	if err := leaseFlags(c, cfg); err != nil {
		return cfg, err
	}
	if addr := c.String("listen"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return cfg, usage("--listen %s: %v", addr, err)
		}
		cfg.Listener = l // the node's mesh owns it from here
	}
	return cfg, nil
}

// leaseFlags checks --lease and --lease-margin for a quorum node as the
// node would once started (node.Config), so that they are usage errors
// said at once: typed for a protocol without failure handling, where no
// lock expires, they would be ignored; a lease not above its margin is
// refused.
func leaseFlags(c *cli.Context, cfg node.Config) error {
	if cfg.Heartbeat() == 0 {
		if f := typedOf(c, "lease", "lease-margin"); f != "" {
			return usage("--%s applies to maekawa and cao-singhal only, whose failure handling gives locks a lease; %s has none (a lock lasts until released): drop --%s", f, cfg.Protocol, f)
		}
		return nil
	}
	lease, margin := cfg.Lease, cfg.LeaseMargin
	if lease == 0 {
		lease = node.DefaultLease
	}
	if margin == 0 {
		margin = node.DefaultLeaseMargin
	}
	if lease <= margin {
		return usage("--lease %v must exceed --lease-margin %v: a holder stops its work the margin before its lease runs out", lease, margin)
	}
	return nil
}

// setupError words a protocols.Setup error in terms of the flags.
func setupError(err error) error {
	return usage("%v", strings.NewReplacer("protocols: unknown protocol", "--algo: unknown protocol",
		"protocols: unknown coterie", "--coterie: unknown coterie").Replace(err.Error()))
}

// locker is what the daemon needs from its node: the node itself
// (daemonNode), or a stand-in while it joins (joining).
type locker interface {
	acquire(ctx context.Context, name string, try bool) (mcnode.Lease, error)
	status() (*statusView, error)
	leave(ctx context.Context) error
}

// daemonNode is the node a daemon serves, of either mode, and what the
// daemon keeps beside it.
type daemonNode struct {
	mcnode.Locker
	keyfile string       // multicast mode: where its keys are kept ("" without a key)
	keys    *keyAgent    // multicast mode with a key: spreads key changes
	via     *group.Group // quorum mode: the multicast group the peers came from, if they did
}

// stoppedOf returns a channel closed when a quorum-mode node stops (by
// itself: declared failed, node.ErrFailed; or closed), or nil.
func stoppedOf(l locker) <-chan struct{} {
	if s, ok := l.(interface{ stopped() <-chan struct{} }); ok {
		return s.stopped()
	}
	return nil
}

func (d daemonNode) stopped() <-chan struct{} {
	if n, ok := mcnode.Unwrap(d.Locker).(*node.Node); ok {
		return n.Done()
	}
	return nil
}

// misconfiguredStop returns why a quorum-mode node stopped by itself if
// it was for a peer with another setup (node.ErrMisconfigured), else nil.
func misconfiguredStop(l locker) error {
	if d, ok := l.(daemonNode); ok {
		if n, ok := mcnode.Unwrap(d.Locker).(*node.Node); ok {
			if cause := n.StopCause(); errors.Is(cause, node.ErrMisconfigured) {
				return cause
			}
		}
	}
	return nil
}

func (d daemonNode) acquire(ctx context.Context, name string, try bool) (mcnode.Lease, error) {
	if try {
		return d.TryAcquire(ctx, name)
	}
	return d.Acquire(ctx, name)
}

// leaseExpiry returns when a lease runs out unless renewed, on
// CLOCK_BOOTTIME (internal/boottime), and false where it has no deadline
// another process can compare with its own clock: quorum mode's leases
// expire only with failure handling (Maekawa's, Cao and Singhal's), and
// off Linux the boot clock is private to this process, so `mcnode lock`
// relies on the daemon's word alone.
func leaseExpiry(l mcnode.Lease) (time.Duration, bool) {
	el, ok := l.(interface{ Expires() time.Time })
	if !ok || !boottime.HostWide() {
		return 0, false
	}
	e := el.Expires()
	if e.IsZero() {
		return 0, false
	}
	return time.Duration(e.UnixNano()), true
}

func (d daemonNode) status() (*statusView, error) {
	switch rt := mcnode.Unwrap(d.Locker).(type) {
	case *group.Group:
		st, err := rt.Status()
		if err != nil {
			return nil, err
		}
		return viewStatus(st), nil
	case *node.Node:
		v, err := quorumStatus(d.Locker, rt)
		if err == nil && d.via != nil {
			// Two runs of the group the peers were found in (a split while
			// they were found) each fixed peers of their own.
			if gs, err := d.via.Status(); err == nil {
				v.OtherRun = gs.Stats.OtherInstance
			}
		}
		return v, err
	}
	return nil, fmt.Errorf("a node of neither mode: %T", d.Locker)
}

// linkDrop is what a quorum node's links refused for one reason.
type linkDrop struct {
	reason string
	n      uint64
}

// linkDrops lists what the links refused, by reason, as the metrics and
// status name them.
func linkDrops(s qnet.Stats) []linkDrop {
	return []linkDrop{
		{"malformed", s.Malformed}, {"bad-sender", s.BadSender}, {"foreign-hello", s.ForeignHello},
		{"restarted", s.Restarted}, {"unauthenticated", s.Unauthenticated}, {"crowded", s.Crowded},
	}
}

// brokenLinksNote is what a node without failure handling adds to its
// quorum line once links broke: TCP may have lost what was in flight on
// them, which these protocols never ask for again, and nothing tells
// whether it did (a stalled lock looks like a busy one).
func brokenLinksNote(broke uint64) string {
	return fmt.Sprintf("; but its links broke %s since it started, and this protocol does not ask again for what was in flight on them: if a lock is not granted for long, restart every node of the group", plural(int(broke), "time"))
}

// quorumStatus is a quorum-mode node's status: what mcnode.Status maps
// for either mode (l is n, wrapped), and the messages sent by kind, which
// only the node counts.
func quorumStatus(l mcnode.Locker, n *node.Node) (*statusView, error) {
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	ns, err := n.Status()
	if err != nil {
		return nil, err
	}
	v := &statusView{Group: st.Group, Mode: modeQuorum, Protocol: st.Protocol, Coterie: st.Coterie, Quorum: st.Quorum, Self: st.Self,
		Addr: st.Addr, Sent: map[string]int64{}, Received: st.Received, Dropped: st.Dropped, Margin: ns.LeaseMargin.Milliseconds(),
		QuorumHeld: ns.Reachable}
	var down []string
	for _, m := range st.Members {
		mv := memberView{ID: m.ID, Addr: m.Addr}
		if i := int(m.ID); i != ns.Self && i < len(ns.Links) {
			mv.Link = "up"
			switch {
			case ns.Links[i].Restarted:
				mv.Link = "refused: it restarted"
				down = append(down, fmt.Sprintf("node %d, refused as restarted: restart every node", i))
			case !ns.Links[i].Up:
				mv.Link = "down"
				down = append(down, fmt.Sprintf("node %d", i))
			}
		}
		v.Members = append(v.Members, mv)
	}
	// What mcnode lock waits on: a lock is taken only while the links to
	// the nodes this one asks are up (node.Status.Reachable).
	switch {
	case ns.Reachable:
		v.QuorumText = "reaches the nodes it asks for a lock"
	case len(down) > 0:
		v.QuorumText = "cannot reach the nodes it asks for a lock, and takes none (links down: " + strings.Join(down, ", ") + ")"
	default:
		v.QuorumText = "cannot take a lock now, though its links are up: it waits to be admitted by the nodes it asks, or out its last incarnation's leases"
	}
	for i, name := range ns.Held {
		v.Resources = append(v.Resources, resourceView{Name: name, Holder: st.Self, Held: true, Token: ns.Tokens[i]})
	}
	if ns.LeaseMargin == 0 && ns.Net != nil && ns.Net.Reconnects > 0 {
		v.QuorumText += brokenLinksNote(ns.Net.Reconnects)
	}
	if ns.Net != nil {
		// What the links refused, as the metrics count it (mcnode_dropped_
		// total): status said "0 dropped" while every connection of a
		// peer with another key failed (black-box round).
		net := ns.Net
		for _, d := range linkDrops(*net) {
			if d.n > 0 {
				if v.Drops == nil {
					v.Drops = map[string]uint64{}
				}
				v.Drops[d.reason] = d.n
			}
		}
		if net.Unauthenticated > 0 && len(down) > 0 {
			v.QuorumText += fmt.Sprintf("; %s did not authenticate (TLS with the group key): a peer with another --keyfile, or none?", plural(int(net.Unauthenticated), "connection"))
		}
	}
	for k, n := range ns.Stats.Sent {
		if n > 0 {
			v.Sent[q.Kind(k).String()] = int64(n)
		}
	}
	return v, nil
}

func (d daemonNode) leave(ctx context.Context) error {
	err := d.Leave(ctx)
	if d.via != nil {
		err = errors.Join(err, d.via.Leave(ctx))
	}
	return err
}

// prepareNode checks the flags of this host's node and returns what joins
// (multicast) or starts (quorum) it, so that a bad flag is reported before
// anything is opened. It also claims the group's state files for this
// daemon (claimState); release gives them up.
func prepareNode(c *cli.Context, log zerolog.Logger) (start func(context.Context, *joining) (locker, error), why string, release func(), err error) {
	m, err := mode(c)
	if err != nil {
		return nil, "", nil, err
	}
	if m == modeMulticast {
		cfg, err := groupConfig(c, log)
		if err != nil {
			return nil, "", nil, err
		}
		release := func() {}
		if cfg.TimestampFile != "" {
			if release, err = claimState(strings.TrimSuffix(cfg.TimestampFile, ".timestamp"), log); err != nil {
				return nil, "", nil, err
			}
		}
		why := ""
		if waits := daemonMembership(c, &cfg, log); waits != "" {
			why = "waiting for the group: " + waits
		}
		return func(ctx context.Context, j *joining) (locker, error) {
			cfg := cfg
			cfg.Joining = j.watch
			g, err := group.Join(ctx, cfg)
			if err != nil {
				return nil, &exitError{code: 1, err: err}
			}
			recordMode(cfg.TimestampFile, modeMulticast, log)
			return withKeyAgent(daemonNode{Locker: mcnode.Wrap(g), keyfile: c.String("keyfile")}, log), nil
		}, why, release, nil
	}
	cfg, err := quorumConfig(c, log)
	if err != nil {
		return nil, "", nil, err
	}
	release = func() {}
	f, err := timestampFile(c, log)
	if err != nil {
		return nil, "", nil, err
	}
	if f != "" {
		if release, err = claimState(strings.TrimSuffix(f, ".timestamp"), log); err != nil {
			return nil, "", nil, err
		}
		// The highest fencing token this node saw, so that a restarted
		// group's tokens start above it (node.Config.TokenFile).
		cfg.TokenFile = strings.TrimSuffix(f, ".timestamp") + ".quorum-tokens"
	}
	var discover *group.Config // where to find the peers, without --peers
	if c.String("peers") == "" {
		gcfg, err := groupConfigKeyed(c, log, func() ([]seal.Key, error) { return cfg.Keys, nil })
		if err != nil {
			release()
			return nil, "", nil, err
		}
		discover = &gcfg
	}
	var last *daemonNode
	return func(ctx context.Context, j *joining) (locker, error) {
		if last != nil {
			// Started anew (declared failed): as the same node of the same
			// group (the peers it found, the multicast group it found them
			// in), with the keys the last node had: `mcnode keys` changed
			// them in the running node and, where it could, in the key
			// file; where it could not (read-only, as under the service),
			// the file is behind the group, and a node started from it
			// would seal with a key the others may have dropped.
			if addr := c.String("listen"); addr != "" {
				// The last node closed the listener.
				l, err := net.Listen("tcp", addr)
				if err != nil {
					return nil, &exitError{code: 1, err: fmt.Errorf("--listen %s: %w", addr, err)}
				}
				cfg.Listener = l
			}
			if c.String("keyfile") != "" {
				keys, err := last.liveKeys(c.String("keyfile"))
				if err != nil {
					return nil, &exitError{code: 1, err: fmt.Errorf("--keyfile: %w", err)}
				}
				cfg.Keys = keys
			}
			if n, ok := mcnode.Unwrap(last.Locker).(*node.Node); ok {
				if st, err := n.Status(); err == nil {
					cfg.Peers, cfg.Self = st.Peers, st.Self
				}
			}
			discover = nil
		}
		l, err := startQuorum(ctx, cfg, discover, j, log)
		d, ok := l.(daemonNode)
		if !ok || err != nil {
			return l, err
		}
		d.keyfile = c.String("keyfile")
		if last != nil {
			d.via = last.via
		}
		d = withKeyAgent(d, log)
		last = &d
		recordMode(f, modeQuorum, log)
		return d, nil
	}, "its quorum node is not serving yet", release, nil
}

// liveKeys are the keys d's node holds, or, if it holds none (it cannot
// tell), those of the key file at path.
func (d daemonNode) liveKeys(path string) ([]seal.Key, error) {
	keyChanges.Lock() // a change another member asked for may be under way
	defer keyChanges.Unlock()
	if k, err := d.keyed(); err == nil {
		if keys, err := k.KeyRing(); err == nil && len(keys) > 0 {
			return keys, nil
		}
	}
	return seal.LoadKeyFile(path)
}

// leaveDiscovery leaves the multicast group in which a quorum-mode daemon
// found its peers, once its node, closed by closeNode, could not be started
// again: the daemon exits, and its place in that group would otherwise
// stay until the group noticed the silence.
func leaveDiscovery(l locker, log zerolog.Logger) {
	d, ok := l.(daemonNode)
	if !ok || d.via == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := d.via.Leave(ctx); err != nil {
		log.Warn().Err(err).Msg("leaving the group the peers were found in: not confirmed; the group will notice the silence")
	}
}

// leaveBounded leaves the group peersFromGroup joined, waiting for the
// group's word at most leaveTimeout: members stopped together (a host's
// shutdown, systemd stopping them all) each waited for ever for a leave
// that the others, leaving too, did not record, and ignored every signal
// meanwhile (black-box round).
func leaveBounded(g *group.Group) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	_ = g.Leave(ctx)
}

// closeNode closes a quorum-mode daemon's node alone, keeping the multicast
// group it found its peers in (a node declared failed starts anew as the
// same node of the group).
func closeNode(l locker) {
	if d, ok := l.(daemonNode); ok {
		if n, ok := mcnode.Unwrap(d.Locker).(*node.Node); ok {
			_ = n.Close() // waits for the first Close: the port is then free
		}
	}
}

// withKeyAgent starts d's key agent if its node has group keys, so that
// `mcnode keys` reaches every member (see keysTopic).
func withKeyAgent(d daemonNode, log zerolog.Logger) daemonNode {
	if ids, err := d.keyIDs(); err == nil && len(ids) > 0 {
		d.keys = startKeyAgent(d.Locker, d, log)
	}
	return d
}

// daemonMembership keeps the daemon's membership record in --state-dir, and
// refuses to found the group if the record says this host was a member when
// its daemon last stopped without leaving: the group may well run on, cut off
// from this host, and a second group would grant the same locks. --found
// overrides it. It returns why it refused, or "".
func daemonMembership(c *cli.Context, cfg *group.Config, log zerolog.Logger) string {
	if cfg.TimestampFile == "" {
		return "" // --state-dir none, or no state directory
	}
	cfg.MemberFile = strings.TrimSuffix(cfg.TimestampFile, ".timestamp") + ".member"
	was, err := group.WasMember(cfg.MemberFile)
	switch {
	case err != nil && c.Bool("found"):
		log.Warn().Err(err).Msg("cannot tell whether this host was a member when its daemon last stopped; --found: founding the group if no member answers")
	case err != nil:
		// The record is there but unreadable: it may say this host was a
		// member, and founding on a guess could make a second group.
		cfg.Bootstrap = false
		log.Error().Err(err).Str("file", cfg.MemberFile).
			Msg("cannot tell whether this host was a member when its daemon last stopped: waiting for the group instead of founding one (make the file readable or remove it, or start with --found if the whole group stopped)")
		return "the membership record " + cfg.MemberFile + " cannot be read, so this host may have been a member, and founds no second group (make the file readable or remove it, or start with --found if the whole group stopped)"
	case was != "" && c.Bool("found"):
		log.Warn().Str("record", was).Msg("this host was a member when its daemon last stopped without leaving; --found: founding the group if no member answers")
	case was != "":
		cfg.Bootstrap = false
		// A warning: after a crash or kill -9 the group usually runs on,
		// and this daemon joins it at once.
		log.Warn().Str("record", was).Str("file", cfg.MemberFile).
			Msg("this host was a member when its daemon last stopped without leaving, and the group may run on without it: waiting for the group instead of founding a second one (if the whole group stopped, start one daemon with --found)")
		return "this host was a member when its daemon last stopped without leaving, and founds no second group (if the whole group stopped, start one daemon with --found)"
	}
	return ""
}

// rosterTopic is the update topic on which quorum nodes that found their
// peers in a multicast group publish the list, every rosterEvery.
const (
	rosterTopic = "mcnode/quorum-peers"
	rosterEvery = time.Second
)

// publishRoster publishes peers on via every rosterEvery until n stops, so
// that a node restarted later takes its old place (placeInRoster). A list
// too long for one update is not published: such a node cannot come back.
func publishRoster(via *group.Group, n *node.Node, peers []string, log zerolog.Logger) {
	data := []byte(strings.Join(peers, ","))
	t := time.NewTicker(rosterEvery)
	defer t.Stop()
	for {
		if err := via.Publish(rosterTopic, data); err != nil && !errors.Is(err, group.ErrNodeClosed) {
			log.Warn().Err(err).Msg("cannot publish the peer list: a node of this group restarted later will not find its place")
			return
		}
		select {
		case <-n.Done():
			return
		case <-via.Done():
			return
		case <-t.C:
		}
	}
}

// placeInRoster finds this node's place in a published peer list: its own
// address in the multicast group if listed (the group's first nodes list
// it), else an entry at this host's address whose port it can listen on,
// so not a live node's (a node that comes back, at another port). It
// returns the list, the place and the listener.
func placeInRoster(data []byte, want int, g *group.Group, log zerolog.Logger) (peers []string, self int, l net.Listener, ok bool) {
	peers = strings.Split(string(data), ",")
	if len(peers) != want || qnet.CheckPeers(peers) != nil {
		log.Warn().Int("quorum_size", want).Int("listed", len(peers)).Msg("ignored a published peer list of another size, or with a bad address (another --quorum-size?)")
		return nil, 0, nil, false
	}
	st, err := g.Status()
	if err != nil {
		return nil, 0, nil, false
	}
	host, _, err := net.SplitHostPort(st.Addr)
	if err != nil {
		return nil, 0, nil, false
	}
	if i := slices.Index(peers, st.Addr); i >= 0 {
		l, err := net.Listen("tcp", peers[i])
		return peers, i, l, err == nil
	}
	for i, p := range peers {
		if h, _, _ := net.SplitHostPort(p); h != host {
			continue
		}
		if l, err := net.Listen("tcp", p); err == nil {
			return peers, i, l, true
		}
	}
	return nil, 0, nil, false
}

// startQuorum starts a quorum-mode node, taking its peers from the
// multicast group discover names if it is set; j, if not nil, is told how
// that goes, for `mcnode status`.
func startQuorum(ctx context.Context, cfg node.Config, discover *group.Config, j *joining, log zerolog.Logger) (locker, error) {
	var via *group.Group
	if discover != nil {
		var err error
		if via, err = peersFromGroup(ctx, *discover, &cfg, j, log); err != nil {
			return nil, &exitError{code: 1, err: err}
		}
	}
	n, err := node.Start(cfg)
	if err != nil {
		if via != nil {
			_ = via.Leave(ctx)
		}
		return nil, &exitError{code: 1, err: err}
	}
	go func() {
		if err := n.WaitConnected(ctx); err == nil {
			log.Info().Int("peers", len(cfg.Peers)).Msg("connected to every peer")
		}
	}()
	if via != nil {
		go publishRoster(via, n, cfg.Peers, log)
	}
	return daemonNode{Locker: mcnode.Wrap(n), via: via}, nil
}

// needDaemon is the error for quorum-mode commands run without a daemon.
func needDaemon(c *cli.Context, what string) error {
	path, err := socketPath(c)
	if err != nil {
		return err
	}
	// No exit status of its own: lock's (no group to ask) or status's.
	return fmt.Errorf("no daemon serves %s: in quorum mode %s goes through `mcnode run --mode quorum` on this host "+
		"(the quorums are fixed, so a node cannot come and go for one command)", path, what)
}

// peersFromGroup fills cfg.Peers and cfg.Self from the multicast group's
// membership: it joins the group, waits until it has len(cfg.Peers)
// members, and takes the first that many by member ID, each at its group
// unicast address (host:port), which the node then also listens on over
// TCP. The membership is the group's replicated view, so every node that
// does this gets the same list. The node stays a member, so that nodes
// starting later still find the group complete.
func peersFromGroup(ctx context.Context, gcfg group.Config, cfg *node.Config, j *joining, log zerolog.Logger) (*group.Group, error) {
	want := len(cfg.Peers)
	if j != nil {
		// What the join waits for (a group it cannot read, say), as a
		// multicast daemon's status shows it.
		gcfg.Joining = j.watch
	}
	g, err := group.Join(ctx, gcfg)
	if err != nil {
		return nil, err
	}
	rosters, stopRosters := g.Subscribe(rosterTopic)
	defer stopRosters()
	joined := time.Now()
	log.Info().Int("quorum_size", want).Msg("waiting for the multicast group to have the quorum mode's nodes")
	for {
		// A running group's nodes publish their peer list: a node that
		// comes back takes its old place in it, where the membership
		// would give it another (it is a new member, at another port).
		select {
		case u := <-rosters:
			if peers, self, l, ok := placeInRoster(u.Data, want, g, log); ok {
				copy(cfg.Peers, peers)
				cfg.Self, cfg.Listener = self, l
				log.Info().Strs("peers", cfg.Peers).Int("node_id", cfg.Self).Msg("peers taken from the list the running nodes publish, this node's place in it included")
				return g, nil
			}
		default:
		}
		st, err := g.Status()
		if err != nil {
			leaveBounded(g)
			return nil, err
		}
		if j != nil {
			phase := fmt.Sprintf("a member of the multicast group, finding the quorum mode's %d nodes in it: %s so far", want, plural(len(st.Members), "member"))
			if !st.Quorum.Held {
				phase += "; " + st.Quorum.String()
			}
			if st.Stats.OtherInstance > 0 {
				// A split while the nodes were found: each side's nodes
				// wait in a run of their own, for good.
				phase += "; " + otherRunWarning(st.Stats.OtherInstance)
			}
			j.phase.Store(&phase)
		}
		// A group that runs publishes its list every second: this node
		// takes the membership's only once it has heard none for two.
		if len(st.Members) >= want && time.Since(joined) >= 2*rosterEvery {
			cfg.Self = -1
			for i, m := range st.Members[:want] {
				cfg.Peers[i] = m.Addr
				if m.ID == st.Self {
					cfg.Self = i
				}
			}
			if cfg.Self < 0 {
				leaveBounded(g)
				return nil, fmt.Errorf("the multicast group already has %s before this one (--quorum-size %d): this node is not one of the quorum mode's nodes", plural(len(st.Members)-1, "member"), want)
			}
			log.Info().Strs("peers", cfg.Peers).Int("node_id", cfg.Self).Msg("peers taken from the multicast group")
			return g, nil
		}
		select {
		case <-ctx.Done():
			leaveBounded(g)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
