// Package game is mcnode's resource-contention game, and an example of
// embedding mcnode: it uses only the public API (package mcnode's Locker,
// Lease and application state updates), so it plays the same in multicast
// and in quorum mode.
//
// Players move on a grid. Power-ups appear: health (a player's health drains
// by one a second, and a player at zero is out until it respawns), points,
// and a rare prize worth many points. The first player to the target score
// wins the round, and a new round begins.
//
// Mutual exclusion decides everything two players could both claim:
//
//   - A power-up is a lock named "pu/ID". A player that steps onto it asks
//     for the lock with TryAcquire: only the player granted it picks it up;
//     a loser gets ErrLocked and sees "taken by P3" where it stood. Picking
//     up takes PickTime, during which the player holds the lock; then the
//     power-up is consumed and its effect applies. The player keeps holding
//     the lock for the rest of the round and a little after, so that a
//     player that missed the news still finds it taken.
//   - Which power-ups exist is decided by one node at a time: the holder of
//     the lock "spawner". It spawns at random free cells, numbering each
//     power-up with its lease's fencing token and a count (token.count):
//     tokens strictly increase from one holder to the next, so two
//     spawners never make the same ID. It multicasts the full list of
//     power-ups in play every SpawnEvery, so a player that missed an update
//     catches up. If its node dies, the group reclaims the lock and another
//     player's waiting Acquire gets it: spawning goes on.
//   - A player whose node dies mid-pickup loses what it held: the group
//     takes the power-up's lock back when the dead node's lease runs out.
//     The spawner sees the picker silent, takes the lock itself (which
//     proves the group reclaimed it), releases it and puts the power-up
//     back into play.
//   - A player that reaches the target takes the lock "win/ROUND": only the
//     first to get it wins the round, however close the race.
//
// Positions, health, scores and spawns travel as application state updates
// (topic "game"), best effort: each player republishes its whole state every
// StateEvery and its takes of the round in turn, the spawner its list and
// the last win, so that a lost update only delays. A player that gives a
// pickup up (its lease lost, the round over) says so, and the spawner puts
// the power-up back once it can take its lock. Each player is the only
// author of its own state: the first node heard speaking for a name keeps
// it until that player is gone, and a scoreboard is the players' own
// latest reports. A player that joins a game under way takes the game's
// round from the first player in it, spawn list or win it hears (until
// then it reports itself joining, and a spawner listens before it
// spawns); from then on it believes nothing from more than a few rounds
// ahead of its own.
//
// At most once. A player consumes a power-up only if, at the end of the
// pickup, its lease is neither lost nor within ConsumeMargin of running
// out: a process paused past its lease (SIGSTOP, a long GC pause) finds its
// time up when it runs again, even before its runtime reports the lease
// lost, and drops the power-up. The one case left is a pause or a cut right
// after the check: the group may then hand the power-up on, and two takes
// of it exist. The fencing token settles it: of two takes, the one with the
// higher token stands in every record, and the player whose take it
// supersedes gives back what it got (it held the lock past its lease, and
// loses what it held). A killed player never consumes.
package game
