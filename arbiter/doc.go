// Package arbiter is the rotating-arbiter mutual-exclusion protocol of
// Pearlin's thesis (Boston College, 2003) as a deterministic state machine,
// made to survive the death of its server, a split network and a paused
// process.
//
// # The protocol
//
// The members of a multicast group share named resources. One member at a
// time is the server: the one the turn schedule (package clock) names for
// the group timestamp T. Only the server advances T, by one for each
// decision it makes, and it multicasts every decision, so the decisions form
// a log numbered by T that every member applies in order:
//
//	Grant     a request decided: the resource is granted, or the requester
//	          queued behind its holder (the paper's RESPONSE)
//	Released  a release recorded; the head of the queue holds the resource
//	OkToJoin  a newcomer admitted, with its logical ID (OK_TO_JOIN)
//	GroupFull a newcomer refused (GROUP_FULL)
//	Left      a member left
//	Sync      the end of a turn (section 3.3): members not heard from this
//	          turn listed, one voter and every observer silent longer than
//	          the lease removed and their resources reclaimed, and T moved
//	          to the first timestamp of the next server's turn
//	Takeover  the start of an epoch: a member took over from a server that
//	          stopped answering
//
// A turn begins with a ping of every member (figure A) and ends with a SYNC,
// which hands the turn to the backup (below). The last timestamp of a turn
// can only be taken by a SYNC or a Takeover, and every decision that changes
// the view carries the timestamp the role moves to, so the role never moves
// implicitly: the race of section 3.3, where the next server sees a response
// before the current server is done, cannot happen.
//
// Beyond the paper: requests wait in a FIFO queue that is part of the
// replicated state; requests are idempotent (by requester and request ID)
// and retried until decided; a member that sees a gap in the log asks for
// the missing decisions (Nak) and members keep a window of recent ones to
// answer, or transfer their whole state; SYNC carries a digest of the state,
// which every member checks; and members hold resources under a lease, so
// that the group reclaims a silent member's resources only once that member
// has stopped using them.
//
// # Failures, and what safety rests on
//
// The paper leaves the server's death open (section 6) and warns that a
// naive takeover gives two servers. This package answers it with epochs, a
// majority's authority and a backup, in the manner of Viewstamped
// Replication (Oki and Liskov, 1988) and Raft (Ongaro and Ousterhout, 2014).
// Safety rests on one timing assumption: members' clocks run at rates that
// differ by at most MaxDriftPPM (1%), counted through suspend. Under it, no
// two members hold a resource at once, whatever is lost, duplicated,
// reordered, partitioned, paused or crashed.
//
// Authority. The server decides only while it has the authority of a
// majority of its view: it pings every HeartbeatTicks, and the answers of a
// majority to a ping sent at tick p let it decide until p+AuthorityTicks. A
// member that answers a ping (or votes, below) promises to vote for no
// takeover until it has heard no ping for Params.TakeoverTicks, counted on
// its own clock from the moment it got the ping; AuthorityTicks is short
// enough that the authority ends first, whatever the rates of the two
// clocks. So the server of a minority side stops deciding before a takeover
// on the majority side can win, and a paused server, resumed, finds its
// authority gone before it decides anything. A server without a majority for
// the takeover timeout stops pinging (it may hear nothing but be heard, and
// its pings would keep the members from taking over).
//
// Epochs. A member that hears no ping for the takeover timeout asks the
// others, first whether they would vote (a pre-vote, so that a member cut
// off alone cannot disrupt the group when it comes back), then for their
// votes for epoch e+1. A member votes once per epoch, only if it has heard no
// ping itself for the takeover timeout, and from then on refuses servers,
// decisions and state of lower epochs. With the votes of a majority of its
// view the candidate brings its log up to the most advanced of its voters'
// (compared by epoch, then T), and decides Takeover: epoch e+1 begins at the
// next timestamp. Two candidates of one epoch cannot both win: each member
// votes once. Candidates go in order, the backup first (see below), and a
// member asked by a candidate ranked before it makes way, once until a
// server is heard again, so that two rarely split the votes. Members whose
// logs went past that point on a branch the new epoch did not take refetch
// the state; decisions are named by (epoch, T), and a node sends decisions
// to another only when the other's log is a prefix of its own
// (wire.EpochMark records where epochs began).
//
// The backup. The crux of a takeover: the old server's last decisions may
// have reached one member only (a grant, its grantee), which may act on them.
// So a grant takes effect, and its grantee uses the resource, only once the
// backup holds the decision: the backup is the member the server hands its
// turn to, named in the state (by the SYNC that started the turn, or the
// Takeover), and it says what it holds in every header (and in an Ack, when
// it applies a grant). A backup counts only once the server it backs up
// holds the decision that named it: until then that server, the backup
// before it, may take over as such, knowing nothing of what the new one
// alone holds (backupTakenUp). If the server dies, the backup is the first
// to ask to take over; it holds every grant in effect, and takes over at
// once. A
// candidate knows it holds them if it made the last decisions itself, or it
// was the backup, or the backup voted for it, and no voter had promised an
// epoch between its log's and its claim's (or just the one right after the
// log's, and the voters show it had no server: each names whom it voted for
// in it, and each so named voted too and says it never took over). The
// backup's vote speaks for the log position it had when it voted: a node
// that has promised an epoch newer than its log's may still apply the old
// epoch's decisions (catching up), but it shows no log position for them,
// and no grant takes effect at it, until its log reaches the epoch it
// promised. Otherwise (the server and its backup died
// together, or the backup is on the other side of a split) it decides the
// Takeover with Wait and grants nothing for a lease and its margin: every
// lease renewed under the old epoch was renewed within its authority, which
// ended before the candidate's majority formed, so by then every member that
// might use an unknown grant has stopped. A log whose epoch began so, and
// shows no decision since, proves nothing either, even to that epoch's
// backup: its server may have died waiting, and the next takeover waits
// too. The backup changes only by the
// SYNC that hands it the turn (it then holds everything) or by a new epoch:
// a server whose backup stops answering takes over from itself, with a new
// backup, rather than name one quietly, which a candidate could not know of.
// A backup that asks to leave is handed the turn first, so that it leaves
// as a former server, with no self-takeover: it hands the turn on at once,
// naming a backup other than itself, and leaves as a member. Should it not
// answer before the hand-over, its leave is decided as any other member's
// and the server takes over from itself; a request to leave, never taken
// back, is served however old (a new epoch's server replays the ones it
// overheard).
//
// A hand-over to the head of a queue (the holder released, left or was
// removed) needs less of the backup: the log up to the decision that made
// the grantee the head. From there the resource can only go to that grantee
// next, in every branch of the log, so the hand-over takes effect as it
// arrives. The grantee does not even wait for the decision: it takes the
// resource when it hears the holder's release, which goes to the group
// (enterOnRelease), once its epoch's server has shown it is past any wait
// for old leases: the synchronization delay is one one-way delay. (The
// holder before it may linger in a new epoch's log, though a cut-off branch
// removed it; removed for its silence, its lease lapsed, and a grant takes
// effect only under a lease that never lapsed since the grant arrived.)
//
// Views. A change of the view (join, leave, removal) is made one member at a
// time, and only once a majority of the view has applied the previous one
// and the epoch's Takeover, so that the views any two majorities are counted
// in differ by one member at most and the majorities intersect (Ongaro's
// Raft thesis, 2014, section 4.1). A newcomer is admitted only if the
// members the server heard since its request would be a majority of the
// grown view: a newcomer that dies at once must not leave a group with dead
// members, not yet removed, without a majority (it could then remove no one).
// Nor is a voter admitted while another voter was never heard by the server
// taking part (any message but a join request): the group holds at most one
// such newcomer, so that a flood of forged join requests that send nothing
// else cannot fill the view with members it cannot remove. (A sender that
// also speaks as each member it was admitted as is a rogue member: without a
// group key, nothing stops it.)
//
// Observers. A member that joins as an observer (Config.Observer: a
// script's lock) takes locks and holds a lease like any other, but every
// majority above counts voters only, in a view of voters only, and only
// voters claim, vote, serve (the turn schedule lists them alone) or back
// the server up. An observer's join, leave or removal changes no majority,
// so it waits for nothing, and any number of observers may die at once: one
// SYNC removes all whose leases ran out (Sync.RemoveObservers), but for the
// first waiter behind a holder it removes (state.headsRemovedWithHolders), and
// a newcomer waits for the voters' greetings only, not a dead observer's. The
// server admits an observer as one only while the group has MinVoters
// voters, and while it has fewer, a SYNC promotes an observer that answered
// its turn's pings: a change of the voters like a join, made only once the
// last change is known to a majority, never in the SYNC that removes a
// voter. A
// voter's leave that would leave fewer than MinVoters waits for such a
// promotion, and a lone voter promotes only an observer it has just heard
// (the two voters it makes must both live). A voter that asked to be an
// observer (promoted, or admitted while voters were short) becomes one
// again in a SYNC (Demote) once the group has more voters than MinVoters,
// all of them answering, and its promotion is a lease old: so the voters
// are, where they can be, the members that asked to be. A server promotes
// only an observer it has just heard, and demotes only while every voter
// answered a ping within two heartbeats. A SYNC makes one change of the
// voters at most. An observer asked for its vote refuses, so that the
// candidate sees its log (it may hold the SYNC that demoted it, alone).
// When many members die at once and a SYNC's or a ping's list of the
// silent no longer fits, it lists the members it renews instead (Renew,
// Answered), or renews nobody.
//
// Tokens. A fencing token is the T of the grant, or, for a resource taken on
// the holder's release, the T the taker's log had reached then, which is
// above every token before and at most the T of the decision that records
// the hand-over. A takeover moves T above
// the highest timestamp its voters saw by TakeoverGap, more than the old
// epoch could have decided since any of them last heard its server, and by
// one gap more for each epoch since that a voter promised (which may have
// begun, on the far side of a split, a gap and a round of turns above what
// its voters saw, and decided from there, with none of it seen here), so
// tokens keep increasing across takeovers even when the candidate misses the
// old epochs' last decisions.
//
// # Leases
//
// A member's lease runs from the last time it was certainly heard by a
// server: the first send of a request a server decided, or its first answer
// to a ping of a turn whose SYNC neither lists it as unheard nor as
// unanswered, or its first answer to a ping that the server's next ping to
// all, sent with a majority's authority in the same view, does not list as
// unanswered; the server's own runs from the ping a majority last answered.
// Renewed at every heartbeat, a connected member's lease outlasts a
// takeover, and the lease wait of one: the anchor precedes a message sent
// with authority, so it precedes any later epoch's takeover, from which the
// new server counts every member's silence.
// A member whose lease has run out gives up what it holds (EventLost) and
// releases it. The group removes a member only when it has been silent for
// LeaseTicks+LeaseMarginTicks, counted from when a server last heard it
// (a SYNC carries on the silence of a member heard early in its turn,
// wire.Sync.Quiet) and summed over the turns of the servers that did not
// hear from it since, so the member has stopped before anything it held is
// granted to another: every anchor of its lease precedes that hearing.
//
// # Bad and hostile input
//
// Step checks every field it relies on and never panics. Every header is
// readable on the wire, so a member is known by its ID, its incarnation and
// the address it sends from, all three as the view records them: a
// datagram that claims a member's ID or incarnation from elsewhere is
// forged, and only a newcomer's join request, or a request for decisions or
// state (answered with NotMember), goes further. From a non-member a member
// takes nothing else, except what a member admitted by decisions it has yet
// to apply may send: decisions, which wait for their turn and are checked
// then, and pings (see pingedByStranger). A decision is applied only if its
// sender is the server the schedule names for its T (a Takeover's own
// server) or a member whose header shows it has applied it, and only if it
// moves T by the step the schedule gives (T+1, or the next server's first
// turn in the new view), so T never nears the end of its range.
//
// A decision that still cannot be applied to the node's state (a join of an
// ID taken, a release by a member that does not hold the resource) changes
// nothing, and marks the state suspect; the node then fetches the state
// again, from the server first. Such a state is sound up to its T, so the
// node may still take over if the server is gone: the new epoch begins at
// that T, without the decision. A state transfer is taken only when this
// node asked for one, only from a member of its view (a newcomer: from a
// sender the state lists), and only if it matches the digest it came with.
// A member told that it left, or that the log no longer lists it, while it
// did not ask to leave reports itself removed (EventRemoved), and the
// runtime rejoins as a new incarnation.
//
// # Using the machine
//
// The machine does no I/O, starts no goroutine and reads no clock. The
// runtime drives it, as etcd's raft is driven:
//
//	for {
//		select {
//		case <-ticker.C:
//			node.TickBy(ticksSinceLastTime) // one step, however many were missed
//		case p := <-packets:
//			for _, m := range p.Messages {
//				node.Step(p.Source, p.Header, m)
//			}
//		}
//		if node.HasReady() {
//			rd := node.Ready()
//			send(rd.Header, rd.Messages) // in order; consecutive ones to one address may share a datagram
//			deliver(rd.Events)
//			node.Advance()
//		}
//	}
//
// Acquire, Release, Cancel, Leave and Publish are the application's
// requests; their outcomes arrive as Events.
package arbiter
