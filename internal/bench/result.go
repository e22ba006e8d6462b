// Package bench measures the multicast arbiter and the quorum protocols on
// one workload, side by side, in two layers: the deterministic simulations
// with a fixed one-way delay T (exact counts, N up to 1,024), and real
// sockets on this host (UDP multicast inside a private network namespace,
// TCP between quorum nodes). It returns rows; the CLI prints them as a
// table, as JSON or as plots.
package bench

// Layers: where a row was measured.
const (
	LayerSim     = "sim"
	LayerSockets = "sockets"
)

// Loads: light is one request at a time in the whole group; heavy is every
// node always waiting; memory is a group holding many locks, for what each
// node keeps (sockets only, the multicast mode).
const (
	Light  = "light"
	Heavy  = "heavy"
	Memory = "memory"
	// Idle is a group taking no lock at all, for the traffic that keeps
	// it (sockets only, the multicast mode).
	Idle = "idle"
	// Failover is a group whose every node loops on one lock, whose holder
	// is killed (its node stops at once, as kill -9 would): the time to the
	// next grant (sockets only, both modes).
	Failover = "failover"
)

// Modes and the multicast mode's protocol name.
const (
	ModeMulticast = "multicast"
	ModeQuorum    = "quorum"
	// RotatingArbiter names the multicast mode's protocol (Pearlin, 2003).
	RotatingArbiter = "rotating-arbiter"
	// RotatingArbiterKeyed is the multicast mode with a group key: every
	// datagram sealed (package seal). The socket layer only: the
	// simulation does not seal.
	RotatingArbiterKeyed = "rotating-arbiter+key"
)

// Row is one measurement: one protocol (and coterie), one N, one load, one
// layer. Times measured on sockets are in microseconds and also in units of
// the one-way delay T measured in the same run; the simulation's are in
// units of its fixed T only (the microsecond fields are zero).
type Row struct {
	Layer     string `json:"layer"`
	Mode      string `json:"mode"`
	Protocol  string `json:"protocol"`
	Coterie   string `json:"coterie,omitempty"`
	Transport string `json:"transport"` // "udp-multicast", "tcp" or "simulated"
	N         int    `json:"n"`
	Load      string `json:"load"`

	Entries int `json:"entries"` // critical-section entries measured
	// Messages is the protocol's own datagrams or stream messages per
	// entry (requests, grants, releases, inquires, ...); Membership is the
	// multicast mode's upkeep (pings and their replies, SYNCs, backup acks,
	// NAKs and repairs, joins) and retries; Total is both.
	Messages   float64 `json:"messages_per_entry"`
	Membership float64 `json:"membership_per_entry"`
	// Acks is the part of Membership that the failover design adds to
	// every grant: the backup's acks, and the server's requests for them.
	Acks  float64 `json:"acks_per_entry,omitempty"`
	Total float64 `json:"total_per_entry"`
	Bytes float64 `json:"bytes_per_entry"` // every message counted in Total

	// Acquire latency: from the request to the entry.
	LatencyP50US float64 `json:"latency_p50_us,omitempty"`
	LatencyP99US float64 `json:"latency_p99_us,omitempty"`
	LatencyP50T  float64 `json:"latency_p50_t"`
	LatencyP99T  float64 `json:"latency_p99_t"`
	// CycleP50US is, at light load on sockets, the median of a whole
	// uncontended acquire plus release, and RTTUS the raw round trip of the
	// row's transport it compares with.
	CycleP50US float64 `json:"acquire_release_p50_us,omitempty"`
	RTTUS      float64 `json:"rtt_us,omitempty"`
	// PerSecond is entries per second on sockets; PerT is entries per T
	// (both layers).
	PerSecond float64 `json:"entries_per_second,omitempty"`
	PerT      float64 `json:"entries_per_t"`
	// Synchronization delay, heavy load: from one holder's release to the
	// next holder's entry, for entries whose node was already waiting, the
	// median.
	SyncDelayUS float64 `json:"sync_delay_us,omitempty"`
	SyncDelayT  float64 `json:"sync_delay_t,omitempty"`
	// TUS is the one-way delay T of the row's transport, measured in the
	// same run (half the median round trip); zero in the simulation.
	TUS float64 `json:"t_us,omitempty"`
	// On sockets, what one entry costs each node on this host, where every
	// node shares the same cores: datagrams or frames received, and the
	// process's CPU time, per entry, divided by N.
	RecvPerNode  float64 `json:"receptions_per_entry_per_node,omitempty"`
	CPUPerNodeUS float64 `json:"cpu_us_per_entry_per_node,omitempty"`
	// Memory rows: Locks held by the group, and what N nodes in one process
	// hold on the Go heap and stacks with them, divided by N, in MiB.
	Locks       int     `json:"locks,omitempty"`
	MemPerNodeM float64 `json:"memory_per_node_mib,omitempty"`
	// Idle rows: datagrams every member sent in a second, on average, and
	// what the busiest sent (the server's role rotates, and with it the
	// pings).
	IdlePerMember float64 `json:"idle_datagrams_per_member_per_second,omitempty"`
	IdleBusiest   float64 `json:"idle_datagrams_busiest_member_per_second,omitempty"`

	Paper *Paper `json:"paper,omitempty"`
	// Failover rows: milliseconds from the kill of the holder to the next
	// grant, to a survivor.
	FailoverMS float64 `json:"failover_ms,omitempty"`

	Err string `json:"error,omitempty"`

	// entriesBy counts a quorum simulation's entries per node: the paper's
	// figure is weighted by them, since a node's cost depends on its
	// quorum.
	entriesBy []int
}

// Paper is what the protocol's paper says this row should measure.
type Paper struct {
	// Messages is the formula for messages per entry at the row's load,
	// MessagesValue its value at the row's N (and quorum size), and
	// MessagesMax, when the paper gives a range, its upper end.
	Messages      string  `json:"messages"`
	MessagesValue float64 `json:"messages_value"`
	MessagesMax   float64 `json:"messages_max,omitempty"`
	// SyncDelay is the synchronization delay the paper claims, in T (heavy
	// load rows only).
	SyncDelay  string  `json:"sync_delay,omitempty"`
	SyncDelayT float64 `json:"sync_delay_t,omitempty"`
}

// Setup names the row's protocol and coterie: "rotating-arbiter",
// "maekawa/fpp", "ricart-agrawala".
func (r Row) Setup() string {
	if r.Coterie == "" {
		return r.Protocol
	}
	return r.Protocol + "/" + r.Coterie
}
