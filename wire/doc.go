// Package wire defines every message of the mcnode rotating-arbiter protocol
// and its encoding on the network.
//
// # Datagram layout
//
// Each UDP datagram carries one or more messages from one sender:
//
//	0      2    3     4          12         20       28       36       44       52         60       72
//	+------+----+-----+----------+----------+--------+--------+--------+--------+----------+--------+-----------
//	| "mc" | v4 |flags| group    | instance | from   | inc    | T      | epoch  | log epoch| for    | messages…
//	+------+----+-----+----------+----------+--------+--------+--------+--------+----------+--------+-----------
//	                    uint64 big-endian fields                                             3 × uint32
//
//	message = kind (1 byte) | body length (uvarint) | body (msgpack array)
//
// group is GroupID(name), so two groups sharing one multicast address ignore
// each other; instance names one run of the group (the founder's
// incarnation); from/inc/T are the sender's logical ID, incarnation and group
// timestamp; epoch is the highest epoch the sender has promised and log epoch
// the epoch of the last decision it applied (see Header); for names the
// members a multicast is for, all zero for every member (see Recipients).
// flags bit 0 marks a datagram sealed with a group key (package seal), whose
// messages only a key holder reads; the header stays readable. Message
// bodies are msgpack (hashicorp/go-msgpack/v2) with struct fields as array
// elements in declaration order; a decoder skips array elements it does not
// know (fields added at the end by a later version) and whole messages of
// kinds it does not know. The hottest kinds are encoded and decoded by hand,
// in exactly the library's forms (fast.go).
//
// # Bounds
//
// Decode never panics and never allocates in proportion to a length it has
// not checked: every msgpack length is first checked against the bytes that
// remain (scan.go), then every decoded value against Limits. The default
// datagram limit is 1400 bytes.
//
// The msgpack tags live only in this package.
package wire
