package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// The control protocol between `mcnode run` and local clients: one JSON
// object per line over a Unix socket, one request per connection.
//
//	client: {"op":"lock","name":"db","try":false}
//	daemon: {"ok":true,"token":1234,"expires_ns":N}  once the lock is held
//	daemon: {"expires_ns":N}                     each time the lease is renewed
//	client: {"op":"release"}  (or closes the connection)
//	daemon: {"released":true}                    once released on request
//	daemon: {"lost":"reason"}                    if the group takes it back
//
// expires_ns is when the daemon's lease runs out unless renewed, in
// nanoseconds of CLOCK_BOOTTIME: the client reads the same clock, and stops
// the work by then if no renewal comes (the daemon may be stopped or hung,
// and could not say the lock is lost).
//
//	client: {"op":"status"}
//	daemon: {"ok":true,"status":{...},"group":"..."}
//	daemon: {"error":"...","status":{...,"joining":"..."},"group":"..."}  not a member yet
//
// "ok" is the one mark of success: a daemon that is not a member of its
// group yet answers with an error, and (multicast mode) with its status
// beside it, which says what it waits for and lists no members.
//
// A client that disconnects while it waits for a lock withdraws its request;
// one that disconnects while it holds the lock releases it. So a script
// killed in its critical section does not keep the lock. Any other line on a
// lock's connection is ignored: the command run under the lock inherits the
// connection, and what it writes there must not release the lock under it.
// A request line is at most maxRequestLine bytes and must come within
// requestTimeout of connecting.
type request struct {
	Op string `json:"op"`
	// Group, if set, is the group the client was told to use (--group or
	// MCNODE_GROUP): a daemon of another group refuses the request, rather
	// than take a lock in a group the client did not ask for.
	Group string `json:"group,omitempty"`
	Name  string `json:"name,omitempty"`
	Try   bool   `json:"try,omitempty"`
	// The key operations: "keys" lists, "key-install" adds Key (base64),
	// "key-use" and "key-remove" take the key's ID.
	Key string `json:"key,omitempty"`
	ID  string `json:"id,omitempty"`
	// Path is where key-install's key file is, on every host.
	Path string `json:"path,omitempty"`
	// Local makes a key operation on this daemon alone; Force makes it
	// even where a member would be cut off (see manageKeys).
	Local bool `json:"local,omitempty"`
	Force bool `json:"force,omitempty"`
}

type response struct {
	OK     bool   `json:"ok,omitempty"`
	Error  string `json:"error,omitempty"`
	Locked bool   `json:"locked,omitempty"` // a --nonblock lock found it held
	Token  uint64 `json:"token,omitempty"`
	Margin int64  `json:"margin_ms,omitempty"` // the group's lease margin
	// Expires is the lease deadline on CLOCK_BOOTTIME, in nanoseconds.
	Expires int64  `json:"expires_ns,omitempty"`
	Lost    string `json:"lost,omitempty"`
	// Group is the daemon's group, in the answer that grants a lock (the
	// command's MCNODE_GROUP) and in a status answer (even one without a
	// status: a quorum-mode daemon still joining).
	Group string `json:"group,omitempty"`
	// Released: the lock was released on the client's request (which
	// may come from the command under it), and the connection ends.
	Released bool        `json:"released,omitempty"`
	Status   *statusView `json:"status,omitempty"`
	Keys     []string    `json:"keys,omitempty"` // key IDs, the one sealing first
	// Warning: a key operation was carried out, but not all of it (the
	// key file not rewritten).
	Warning string `json:"warning,omitempty"`
	// Members are the other members' key IDs after a key operation.
	Members []memberKeys `json:"members,omitempty"`
}

// errUnsafeSocketDir: the control socket's directory could be someone
// else's. Never fall back silently from this.
var errUnsafeSocketDir = errors.New("unsafe control socket directory")

// privateDir checks that nobody but the daemon's user can have put a
// socket in the control socket's directory: in a shared directory such as
// /tmp, another user could otherwise put a socket of theirs there and pose
// as the daemon. The directory must not be writable by group or others,
// and must belong to this user, or to root, or sit in a directory that only
// root can write (as a service's runtime directory does, /run/mcnode made by
// systemd for the daemon's own user).
func privateDir(dir string) error {
	closed := func(path string, owners ...uint32) bool {
		fi, err := os.Lstat(path)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return fi.IsDir() && ok && fi.Mode().Perm()&0o022 == 0 && slices.Contains(owners, st.Uid)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	owner := uint32(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = st.Uid
	}
	if closed(dir, uint32(os.Getuid()), 0) || closed(dir, owner) && closed(filepath.Dir(dir), 0) {
		return nil
	}
	return fmt.Errorf("%w: %s is not a directory of yours (or root's, or a service's under a root-only directory) that only its owner can write to (remove it, or choose another with --socket)", errUnsafeSocketDir, dir)
}

// listen opens the control socket of a daemon of group, refusing if another
// daemon serves it and removing a stale one.
func listen(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if err := privateDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := notServed(path, group); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	return l, nil
}

// notServed fails if a daemon answers at the control socket path, saying
// whether it serves group, the one a daemon means to start in, or which
// other: a daemon of another group given the same --socket was told one of
// its own group served there. A daemon that does not say (stopped, or of a
// release whose status answer lacks its group) is named by no group.
func notServed(path, group string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	switch served := servedGroup(c); served {
	case "":
		return fmt.Errorf("a daemon already serves %s (it did not say which group it serves)", path)
	case group:
		return fmt.Errorf("a daemon for this group already serves %s", path)
	default:
		return fmt.Errorf("a daemon of group %s already serves %s, not one of group %s: give each daemon its own --socket", strconv.Quote(served), path, strconv.Quote(group))
	}
}

// servedTimeout bounds notServed's question: a daemon answers a status
// request within a millisecond unless it is stopped.
const servedTimeout = time.Second

// servedGroup asks the daemon on conn which group it serves: "" if it does
// not say within servedTimeout.
func servedGroup(conn net.Conn) string {
	_ = conn.SetDeadline(time.Now().Add(servedTimeout))
	d := &daemonClient{conn: conn, in: bufio.NewReader(conn)}
	if d.send(request{Op: "status"}) != nil {
		return ""
	}
	r, err := d.receive()
	switch {
	case err != nil:
		return ""
	case r.Group != "":
		return r.Group
	case r.Status != nil:
		return r.Status.Group
	}
	return ""
}

const (
	// maxRequestLine bounds a line a client sends; the longest request,
	// key-install's, takes a few hundred bytes.
	maxRequestLine = 64 << 10
	// requestTimeout is how long a client has to send its request once
	// connected: an idle connection holds a file descriptor.
	requestTimeout = 10 * time.Second
	// maxAcceptBackoff caps the wait between two failed accepts.
	maxAcceptBackoff = time.Second
)

// errLineTooLong: a client sent a line over maxRequestLine bytes.
var errLineTooLong = fmt.Errorf("request line over %d bytes", maxRequestLine)

// serveControl answers local clients until the listener closes. A failed
// accept (out of file descriptors, say) is retried after a pause that grows
// to maxAcceptBackoff: returning would leave the daemon running with no way
// for a client to reach it.
func serveControl(l net.Listener, g locker, h *holders, log zerolog.Logger) {
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if backoff == 0 {
				log.Error().Err(err).Msg("control socket: accepting a client failed; retrying until it works")
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			time.Sleep(backoff)
			continue
		}
		if backoff != 0 {
			log.Info().Msg("control socket: accepting clients again")
			backoff = 0
		}
		go handleControl(conn, g, h, log)
	}
}

// readLine reads one line of at most max bytes, newline included. A longer
// one is read to its end and thrown away, and errLineTooLong returned, so
// that a client cannot make the daemon hold more than max bytes of it.
func readLine(in *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := in.ReadSlice('\n')
		if len(line)+len(part) > max {
			line = line[:0]
			max = -1 // too long already: discard up to the newline
		} else if max >= 0 {
			line = append(line, part...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return nil, err
		case max < 0:
			return nil, errLineTooLong
		}
		return line, nil
	}
}

func handleControl(conn net.Conn, g locker, h *holders, log zerolog.Logger) {
	defer conn.Close()
	in := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)
	var req request
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	line, err := readLine(in, maxRequestLine)
	switch {
	case errors.Is(err, errLineTooLong):
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = enc.Encode(response{Error: "bad request: " + err.Error()})
		return
	case err != nil:
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if err := json.Unmarshal(line, &req); err != nil {
		_ = enc.Encode(response{Error: "bad request: " + err.Error()})
		return
	}
	if have := groupOf(g); req.Group != "" && have != "" && req.Group != have {
		_ = enc.Encode(response{Error: fmt.Sprintf("this daemon serves group %s, not %s: use the socket of a daemon of group %s (--socket), or leave --group and MCNODE_GROUP unset to use this one",
			strconv.Quote(have), strconv.Quote(req.Group), strconv.Quote(req.Group))})
		return
	}
	switch req.Op {
	case "status":
		st, err := g.status()
		if err != nil {
			// A daemon that joins says why, with its status if it has one.
			_ = enc.Encode(response{Error: err.Error(), Status: st, Group: groupOf(g)})
			return
		}
		_ = enc.Encode(response{OK: true, Status: st, Group: groupOf(g)})
	case "lock":
		// The name check mcnode lock makes, for a client that is not
		// mcnode lock, on the name as sent.
		name, err := sentName(line, req.Name)
		if err == nil {
			err = checkLockName(name)
		}
		if err != nil {
			_ = enc.Encode(response{Error: err.Error()})
			return
		}
		serveLock(conn, in, enc, g, h, req, log)
	case "keys", "key-install", "key-use", "key-remove":
		r, err := manageKeys(g, req)
		if err != nil {
			_ = enc.Encode(response{Error: err.Error()})
			return
		}
		if r.Warning != "" {
			log.Warn().Str("op", req.Op).Msg(r.Warning)
		}
		_ = enc.Encode(r)
	default:
		_ = enc.Encode(response{Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
}

// sentName is the lock name in the request line as the client sent it,
// given decoded, the name encoding/json made of it. encoding/json puts
// U+FFFD in place of bytes that are not UTF-8 and of a \u escape of half a
// surrogate pair without its other half, so the bytes "\xff\xfe" and the
// escapes "\ud800\ud800" would both be granted as the lock "\ufffd\ufffd",
// which checkLockName finds valid UTF-8. Only a name with U+FFFD in it
// can have been changed so: it is then decoded again, keeping those bytes
// (a lone half as its three bytes, which are not UTF-8 either), for the
// check to see. A name given again as something else than a string (null
// leaves the decoded string as it was, from an earlier key) is refused.
func sentName(line []byte, decoded string) (string, error) {
	if !strings.ContainsRune(decoded, utf8.RuneError) {
		return decoded, nil
	}
	var raw struct {
		Name json.RawMessage `json:"name"`
	}
	if json.Unmarshal(line, &raw) != nil || len(raw.Name) < 2 || raw.Name[0] != '"' {
		return "", errors.New("the lock name must be given once, as a JSON string")
	}
	return unquoteKeeping(raw.Name[1 : len(raw.Name)-1]), nil
}

// unquoteKeeping decodes the body of a JSON string literal (valid JSON:
// encoding/json has read it) without replacing anything, as sentName
// needs.
func unquoteKeeping(body []byte) string {
	hex4 := func(b []byte) rune {
		v, _ := strconv.ParseUint(string(b), 16, 16)
		return rune(v)
	}
	var out []byte
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			out = append(out, body[i])
			continue
		}
		i++
		switch body[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(body[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
				if pair := utf16.DecodeRune(r, hex4(body[i+3:i+7])); pair != utf8.RuneError {
					r, i = pair, i+6
				}
			}
			if utf16.IsSurrogate(r) {
				// What utf8.AppendRune refuses to write: the bytes of the
				// code point, as if it were one.
				out = append(out, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
			} else {
				out = utf8.AppendRune(out, r)
			}
		default: // \" \\ \/
			out = append(out, body[i])
		}
	}
	return string(out)
}

// serveLock acquires for a client and holds the lock while the client stays
// connected.
func serveLock(conn net.Conn, in *bufio.Reader, enc *json.Encoder, g locker, h *holders, req request, log zerolog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client's release, or its going away, ends it. Nothing else does:
	// the command under the lock holds the connection too (see
	// runLocked), and may write to it by mistake.
	gone := make(chan struct{})
	var asked atomic.Bool // a release request, not the connection's end
	go func() {
		defer func() { close(gone); cancel() }()
		warned := false
		for {
			line, err := readLine(in, maxRequestLine)
			if err != nil && !errors.Is(err, errLineTooLong) {
				return
			}
			var r request
			if err == nil && json.Unmarshal(line, &r) == nil && r.Op == "release" {
				asked.Store(true)
				return
			}
			if !warned {
				warned = true
				log.Warn().Str("resource", req.Name).Msg("ignored a line on a lock's connection that is not a release (its command writing to the descriptor it inherited?)")
			}
		}
	}()
	if req.Try {
		// Quorum mode: a node that cannot reach the nodes it asks gets no
		// answer, which TryAcquire took for a lock held elsewhere (status
		// 1, where the lock may well be free): say why instead.
		if st, err := g.status(); err == nil && st.Mode == modeQuorum && !st.QuorumHeld {
			_ = enc.Encode(response{Error: "cannot take a lock now: the node " + st.QuorumText})
			return
		}
		// --nonblock promises an answer at once, but only the server can
		// give it: without a majority none comes, and the request would
		// wait for it. (Whether this node reaches a majority now cannot
		// say: its view is stale for a heartbeat at each turn, and false
		// throughout a takeover, which the wait covers.)
		var cancelTry context.CancelFunc
		ctx, cancelTry = context.WithTimeout(ctx, tryTimeout)
		defer cancelTry()
	}
	lease, err := g.acquire(ctx, req.Name, req.Try)
	switch {
	case errors.Is(err, mcnode.ErrLocked):
		_ = enc.Encode(response{Locked: true, Error: err.Error()})
		return
	case req.Try && errors.Is(err, group.ErrNoAnswer):
		// The node gave up before tryTimeout: it reaches no majority, or
		// its own bound (a takeover's time) passed. The error says which.
		_ = enc.Encode(response{Error: strings.TrimPrefix(err.Error(), "group: ")})
		return
	case req.Try && errors.Is(err, context.DeadlineExceeded):
		why := fmt.Sprintf("no answer from the group's server within %v", tryTimeout)
		if st, serr := g.status(); serr == nil && st.Mode != modeQuorum && !st.QuorumHeld && st.QuorumText != "" {
			why += ": " + st.QuorumText
		}
		_ = enc.Encode(response{Error: why})
		return
	case err != nil:
		_ = enc.Encode(response{Error: err.Error()})
		return
	}
	if !h.hold() {
		// Granted as the daemon stops: the command never started.
		if err := lease.Release(); err != nil && lease.Err() == nil {
			log.Warn().Err(err).Str("resource", req.Name).Msg("release")
		}
		_ = enc.Encode(response{Error: errDaemonStopping.Error()})
		return
	}
	defer h.done() // after the release below: deferred calls run last first
	log.Debug().Str("resource", req.Name).Uint64("token", lease.Token()).Msg("lock held for a local client")
	// Whatever ends the loop below, the lock is released once the client
	// is gone, and not before: the connection may be held by a command
	// still running (see runViaDaemon), which needs the lock until it
	// exits. Releasing a lease that is lost already does nothing.
	defer func() {
		<-gone
		err := lease.Release()
		if err != nil && lease.Err() == nil {
			log.Warn().Err(err).Str("resource", req.Name).Msg("release")
		}
		if asked.Load() {
			// Released, or lost meanwhile: held no more, either way.
			// Whoever asked may still be there (a command that released
			// early, through the descriptor it inherited, runs on): it
			// must not take the connection's end for a lost lock.
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = enc.Encode(response{Released: true})
		}
	}()
	var margin int64
	if st, err := g.status(); err == nil {
		margin = st.Margin
	}
	expires, _ := leaseExpiry(lease)
	if err := enc.Encode(response{OK: true, Token: lease.Token(), Margin: margin, Expires: int64(expires), Group: groupOf(g)}); err != nil {
		return
	}
	renewals := time.NewTicker(leaseReportInterval)
	defer renewals.Stop()
	for {
		select {
		case <-gone:
			return
		case <-lease.Lost():
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = enc.Encode(response{Lost: lease.Err().Error()})
			return
		case <-h.stopping():
			// The client stops the command and goes; the lock is let go
			// then (above), and not before.
			log.Info().Str("resource", req.Name).Msg("the daemon stops: stopping the command that holds the lock before giving it back")
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = enc.Encode(response{Lost: errDaemonStopping.Error()})
			return
		case <-renewals.C:
			if e, ok := leaseExpiry(lease); ok && e != expires {
				expires = e
				// A client that does not read (mcnode lock is stopped, or
				// gone and its command keeps the connection) must not
				// block this loop: it would not see the client go.
				_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
				if err := enc.Encode(response{Expires: int64(e)}); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
			}
		}
	}
}

// errDaemonStopping is what a lock client is told when the daemon that
// holds its lock stops.
var errDaemonStopping = errors.New("the daemon is stopping: the lock is given back once the command has exited")

// holders are the local clients that hold a lock through this daemon. A
// daemon that stops tells them first, and lets their locks go only as
// their commands exit (or after stopWait): it left the group at once,
// which handed a lock on while the command under it still ran, for as long
// as the command took to stop (up to the 150 ms before its SIGKILL). The
// zero of a nil *holders holds everything and never stops (tests).
type holders struct {
	mu      sync.Mutex
	ch      chan struct{} // closed when the daemon stops
	stopped bool
	wg      sync.WaitGroup
}

func newHolders() *holders { return &holders{ch: make(chan struct{})} }

// hold counts one more lock held for a client, unless the daemon stops.
func (h *holders) hold() bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false
	}
	h.wg.Add(1)
	return true
}

// done says a lock held for a client was given back.
func (h *holders) done() {
	if h != nil {
		h.wg.Done()
	}
}

// stopping is closed when the daemon stops.
func (h *holders) stopping() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.ch
}

// stop tells every client that holds a lock to stop its command, and waits
// for them all to give their locks back, for at most wait. It reports
// whether they did.
func (h *holders) stop(wait time.Duration) bool {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		close(h.ch)
	}
	h.mu.Unlock()
	all := make(chan struct{})
	go func() { h.wg.Wait(); close(all) }()
	select {
	case <-all:
		return true
	case <-time.After(wait):
		return false
	}
}

// tryTimeout bounds the wait for the server's answer to a --nonblock
// request: none comes while this node reaches no majority. It is well past
// a takeover (0.5 s by default), after which the new server answers. A
// variable for the tests.
var tryTimeout = 5 * time.Second

// leaseReportInterval is how often the daemon looks for a renewed lease to
// tell its lock clients: below the heartbeat, at which the lease is renewed.
const leaseReportInterval = 50 * time.Millisecond

// daemonClient talks to a local daemon.
type daemonClient struct {
	conn net.Conn
	in   *bufio.Reader
	// group, if set, goes in every request (request.Group).
	group string
}

// askedGroup is the group the user named (--group, MCNODE_GROUP or the
// config file), or "" if the default stands: a daemon reached at a socket
// given outright (--socket, MCNODE_SOCKET) may then serve any group.
func askedGroup(c *cli.Context) string {
	if c.IsSet("group") {
		return c.String("group")
	}
	return ""
}

// groupOf is the group the daemon behind g serves, or "" if unknown.
func groupOf(g locker) string {
	if j, ok := g.(*joining); ok {
		return j.group
	}
	return ""
}

// dialDaemon connects to the daemon; os.ErrNotExist-like errors mean there
// is none.
func dialDaemon(path string) (*daemonClient, error) {
	if path == "" {
		return nil, fmt.Errorf("no control socket path (see clientSocketPath): %w", os.ErrNotExist)
	}
	if err := privateDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, err
	}
	return &daemonClient{conn: conn, in: bufio.NewReader(conn)}, nil
}

func (d *daemonClient) send(req request) error {
	if req.Group == "" {
		req.Group = d.group
	}
	b, _ := json.Marshal(req)
	_, err := d.conn.Write(append(b, '\n'))
	return err
}

func (d *daemonClient) receive() (response, error) {
	var r response
	line, err := d.in.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return r, errors.New("the daemon closed the connection")
		}
		return r, err
	}
	return r, json.Unmarshal(line, &r)
}

func (d *daemonClient) Close() error { return d.conn.Close() }

// joining is the daemon's locker until it is a member. A lock request waits
// for the daemon to be one (the client's --timeout bounds it, as it bounds
// the wait for the lock); every other request, and a --nonblock lock, is
// answered at once with why not yet, rather than left hanging on a socket
// nobody reads (the daemon may wait long for its group: see
// daemonMembership).
type joining struct {
	ready atomic.Pointer[locker]
	// group is the group the daemon serves (its --group).
	group string
	// why is what keeps the daemon from founding the group, if anything
	// does (daemonMembership); "" if it founds one when none answers.
	why string
	// pending reports the node's status while it joins (multicast mode:
	// group.Config.Joining), so that `mcnode status` can tell a daemon
	// that hears no group from one its group has not admitted yet, and
	// show what it drops (a stale key, say).
	pending atomic.Pointer[pendingNode]
	// acquired, if set, is told how long each lock the daemon served took
	// to be granted (the metrics' histogram).
	acquired func(time.Duration)
	// phase, once set, is what the node waits for once joined: a quorum
	// node that found its multicast group waits there for its peers.
	phase atomic.Pointer[string]
}

// pendingNode is a node that joins, and since when.
type pendingNode struct {
	status func() (group.Status, error)
	since  time.Time
}

func (j *joining) get() (locker, error) {
	if g := j.ready.Load(); g != nil {
		return *g, nil
	}
	why := j.why
	if v, err := j.joiningStatus(); err == nil {
		why = v.Joining
	} else if why == "" {
		why = "joining (no member has answered yet)"
	}
	return nil, notMember(why)
}

// notMember is the answer to a request the daemon cannot serve before it
// is a member.
func notMember(why string) error {
	return fmt.Errorf("the daemon is not a member of the group yet: %s", why)
}

// watch is given the status of the node that joins (group.Config.Joining).
func (j *joining) watch(status func() (group.Status, error)) {
	j.pending.Store(&pendingNode{status: status, since: time.Now()})
}

// joiningStatus is the status of the node that joins: what it waits for
// (Joining), its address and what it received and dropped; not the group
// as it sees it, which is no member's view yet (a script that counts the
// members must not take it for one).
func (j *joining) joiningStatus() (*statusView, error) {
	p := j.pending.Load()
	if p == nil {
		return nil, errors.New("no node joins")
	}
	st, err := p.status()
	if err != nil {
		return nil, err
	}
	full := viewStatus(st)
	v := &statusView{Group: full.Group, Addr: full.Addr, Sent: full.Sent, Received: full.Received,
		Dropped: full.Dropped, Filtered: full.Filtered, Drops: full.Drops,
		Joining: joinPhase(st), JoiningFor: ms(time.Since(p.since))}
	if ph := j.phase.Load(); ph != nil && st.Joined {
		v.Joining = *ph
	}
	if j.why != "" {
		v.Joining += "; " + j.why
	}
	return v, nil
}

// joinPhase says what a node that does not serve as a member yet waits for.
func joinPhase(st group.Status) string {
	switch {
	case st.Joined:
		return "joined the group; about to serve local clients"
	case !st.HeardGroup && st.CannotRead:
		return "the group's datagrams arrive, and this node cannot read them"
	case !st.HeardGroup:
		return "no member of the group heard yet"
	case len(st.Members) == 0:
		return "the group answered; waiting to be admitted and given its state"
	}
	return "admitted, with the group's state; waiting for every member's greeting"
}

func (j *joining) acquire(ctx context.Context, name string, try bool) (mcnode.Lease, error) {
	p := j.ready.Load()
	if p == nil && try {
		// Not a member: say why at once (the daemon may have become one
		// since the load above: then ask it).
		if _, err := j.get(); err != nil {
			return nil, err
		}
		p = j.ready.Load()
	}
	if p == nil {
		var err error
		if p, err = j.wait(ctx, nil); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	for {
		l, err := (*p).acquire(ctx, name, try)
		if err == nil && j.acquired != nil {
			j.acquired(time.Since(t0))
		}
		// A quorum-mode node its peers declared failed (while this node
		// was cut off, say) fails its waiting requests, and closed, those
		// that come after, and mcnode run starts it anew. A request that
		// only waited lost nothing: it asks the new node, within the
		// client's time.
		// A node stopped for another setup is not started anew: its
		// clients hear why at once (they waited for a node to come).
		if try || ctx.Err() != nil || errors.Is(err, node.ErrMisconfigured) || !errors.Is(err, node.ErrFailed) && !(errors.Is(err, node.ErrClosed) && exited(*p)) {
			return l, err
		}
		if p, err = j.wait(ctx, p); err != nil {
			return nil, err
		}
	}
}

// exited reports whether g is a quorum-mode node that has stopped.
func exited(g locker) bool {
	select {
	case <-stoppedOf(g):
		return true
	default:
		return false
	}
}

// joinPoll is how often a lock request that came before the daemon was a
// member looks again.
const joinPoll = 20 * time.Millisecond

// wait waits until the daemon serves a node other than last (nil: any),
// or ctx ends.
func (j *joining) wait(ctx context.Context, last *locker) (*locker, error) {
	t := time.NewTicker(joinPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_, err := j.get()
			return nil, fmt.Errorf("%w; %w", ctx.Err(), err)
		case <-t.C:
			if p := j.ready.Load(); p != nil && p != last {
				return p, nil
			}
		}
	}
}

// status is the node's. A daemon that is not a member yet answers with an
// error, as it always has (scripts wait for the daemon by it), and with
// its status too where it has one (multicast mode): a daemon that waits
// long for its group is where an operator most needs to see why.
func (j *joining) status() (*statusView, error) {
	if g := j.ready.Load(); g != nil {
		return (*g).status()
	}
	if v, err := j.joiningStatus(); err == nil {
		return v, notMember(v.Joining)
	}
	_, err := j.get()
	return nil, err
}

func (j *joining) leave(ctx context.Context) error {
	g, err := j.get()
	if err != nil {
		return err
	}
	return g.leave(ctx)
}
