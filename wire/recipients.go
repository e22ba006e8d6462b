package wire

import (
	"encoding/binary"
	"slices"
)

// Recipients names, by the low 32 bits of their IDs, the members a multicast
// datagram is for; the zero value is every member. Most of what the group
// multicasts every member needs (the decisions, the pings), but a member's
// request matters only to the server and its backup, and a release only to
// them and to the member that takes the resource on it: a datagram that
// says so can be dropped, before it wakes anyone, by every other member's
// socket filter. With N members on one host, or a busy group on a LAN, that
// is most of what each member would otherwise read and throw away.
//
// It is a hint, never an authority: a member it does not name loses nothing
// it could not lose to the network, and the protocol repairs any loss. Two
// IDs that agree in their low 32 bits (4 billion joins apart) only keep a
// datagram the filter could have dropped. Unused places repeat the first
// name, so that no place is zero unless all are; a first place that is
// zero means every member, whatever the others say.
type Recipients [3]uint32

// ForOffset is where Header.For begins in the datagram header: its three
// names follow, 4 bytes each, big-endian (a socket filter reads them there).
const ForOffset = 60

// RecipientsOf names up to three members, every member if more are given
// or none is.
func RecipientsOf(ids ...NodeID) Recipients {
	var r Recipients
	k := 0
	for _, id := range ids {
		if uint32(id) == 0 {
			// A member not known, or one whose name would read as
			// "every member": the datagram is for all.
			return Recipients{}
		}
		if slices.Contains(r[:k], uint32(id)) {
			continue
		}
		if k == len(r) {
			return Recipients{}
		}
		r[k] = uint32(id)
		k++
	}
	for i := k; i < len(r) && k > 0; i++ {
		r[i] = r[0]
	}
	return r
}

// All reports whether the datagram is for every member: its first place
// names nobody.
func (r Recipients) All() bool { return r[0] == 0 }

// Includes reports whether the datagram is for member id: it names every
// member, or names id.
func (r Recipients) Includes(id NodeID) bool {
	return r.All() || r[0] == uint32(id) || r[1] == uint32(id) || r[2] == uint32(id)
}

// AddressedElsewhere reports whether a datagram, sealed or not, is of this
// wire version and names in its header the members it is for, none of them
// id: what a socket filter set for id drops. Anything it cannot read is not.
func AddressedElsewhere(datagram []byte, id NodeID) bool {
	if id == 0 || len(datagram) < HeaderLen || datagram[0] != magic[0] || datagram[1] != magic[1] || datagram[2] != Version {
		return false
	}
	return !recipientsAt(datagram).Includes(id)
}

// recipientsAt reads Header.For from a header's bytes.
func recipientsAt(header []byte) Recipients {
	return Recipients{binary.BigEndian.Uint32(header[ForOffset:]), binary.BigEndian.Uint32(header[ForOffset+4:]), binary.BigEndian.Uint32(header[ForOffset+8:])}
}
