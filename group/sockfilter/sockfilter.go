// Package sockfilter builds the multicast socket's filters: programs the
// kernel runs on every datagram as it arrives, before it is queued, so that
// what a node has no use for wakes nobody.
//
// Own is a classic filter that drops the node's own multicasts, which the
// kernel loops back to every group socket on the host, the sender's
// included; any process may attach it. Filter is the eBPF one (loading it
// needs CAP_BPF or root): it drops the node's own multicasts too and, for a
// member, the datagrams whose header names the members they are for, none
// of them this node (wire.Recipients), and it counts both in a map that
// lives as long as the socket. The kernel counts every datagram a filter
// drops together with those it drops for want of buffer (SO_RXQ_OVFL), so a
// node can report a full buffer exactly only where it knows exactly what
// its filter dropped.
package sockfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"unsafe"

	"github.com/mcnode/mcnode/wire"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets a filter reads at. A UDP socket's filter sees a datagram from its
// UDP header on; the IP header lies at the kernel's network offset.
const (
	netOff        = -0x100000  // SKF_NET_OFF
	classicNetOff = 0xfff00000 // the same, as classic BPF's unsigned offsets write it
	udpLen        = 8
)

// Own returns the classic filter that drops the datagrams sent from own, the
// node's unicast address, and keeps all else.
func Own(own netip.AddrPort) []bpf.RawInstruction {
	ip := own.Addr().As4()
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: classicNetOff + 12, Size: 4}, // IPv4 source address
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(ip[:]), SkipTrue: 3},
		bpf.LoadAbsolute{Off: 0, Size: 2}, // UDP source port
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(own.Port()), SkipTrue: 1},
		bpf.RetConstant{Val: 0},          // ours: drop
		bpf.RetConstant{Val: 0xffffffff}, // anyone else's: keep all of it
	})
	if err != nil {
		panic(err) // a fixed program: it assembles, or the code is wrong
	}
	return prog
}

// Filter is the eBPF filter of one socket: a counter map that lives as long
// as the socket, and the program attached for the member the node is now.
type Filter struct {
	own     netip.AddrPort
	dropOwn bool
	// mu keeps Close from releasing the map while it is read or a program
	// made with it: the kernel reuses a closed descriptor's number at once,
	// and another socket's map would answer.
	mu     sync.Mutex
	counts int // the map's file descriptor, -1 once closed: [0] addressed elsewhere, [1] own
}

// Counter slots.
const (
	slotElsewhere = 0
	slotOwn       = 1
)

// ErrUnavailable wraps the kernel's refusal to load an eBPF program for want
// of privilege (CAP_BPF), or where eBPF socket filters are missing.
var ErrUnavailable = errors.New("sockfilter: the kernel refused an eBPF program (it needs CAP_BPF)")

// New creates the counters of a socket's filter, which drops what is sent
// from own if dropOwn. Nothing is attached yet (see Attach).
func New(own netip.AddrPort, dropOwn bool) (*Filter, error) {
	counts, err := bpfCall(unix.BPF_MAP_CREATE, unsafe.Pointer(&mapCreateAttr{mapType: unix.BPF_MAP_TYPE_ARRAY, keySize: 4, valueSize: 8, maxEntries: 2}), unsafe.Sizeof(mapCreateAttr{}))
	if err != nil {
		return nil, fmt.Errorf("%w: creating its counters: %v", ErrUnavailable, err)
	}
	return &Filter{own: own, dropOwn: dropOwn, counts: counts}, nil
}

// Attach loads the program for member id (0: a node with no ID yet, which
// drops only its own) and makes it the socket's (fd), in place of any
// other; the counters go on. The socket keeps the program.
func (f *Filter) Attach(fd int, id wire.NodeID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts < 0 {
		return errClosed
	}
	prog, err := f.load(id, udpLen)
	if err != nil {
		return err
	}
	defer unix.Close(prog)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_BPF, prog); err != nil {
		return fmt.Errorf("sockfilter: attaching the filter: %w", err)
	}
	return nil
}

// Counts returns how many datagrams the filter has dropped as addressed to
// other members, and as the node's own.
func (f *Filter) Counts() (elsewhere, own uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts < 0 {
		return 0, 0, errClosed
	}
	if elsewhere, err = f.count(slotElsewhere); err == nil {
		own, err = f.count(slotOwn)
	}
	return elsewhere, own, err
}

func (f *Filter) count(slot uint32) (uint64, error) {
	buf := heapBytes(12) // the key, then the value
	binary.NativeEndian.PutUint32(buf, slot)
	attr := mapElemAttr{mapFD: uint32(f.counts), key: addr(buf[:4]), value: addr(buf[4:])}
	_, err := bpfCall(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(buf)
	if err != nil {
		return 0, fmt.Errorf("sockfilter: reading the filter's counters: %w", err)
	}
	return binary.NativeEndian.Uint64(buf[4:]), nil
}

// Close releases the counters. Call it once the socket is closed: the
// programs it ran are released with it.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts < 0 {
		return errClosed
	}
	fd := f.counts
	f.counts = -1
	return unix.Close(fd)
}

var errClosed = errors.New("sockfilter: filter closed")

// load loads the program for member id, for datagrams at offset at (behind
// the UDP header, on a socket), and returns its file descriptor. The
// verifier writes its log only when it refuses the program: a log asked of
// every load may not fit the buffer, which older kernels refuse.
func (f *Filter) load(id wire.NodeID, at int32) (int, error) {
	insns := encode(program(f.own, f.dropOwn, uint32(id), int32(f.counts), at))
	license := heapBytes(4)
	copy(license, "GPL")
	attr := progLoadAttr{progType: unix.BPF_PROG_TYPE_SOCKET_FILTER, insnCnt: uint32(len(insns) / 8), insns: addr(insns), license: addr(license)}
	prog, err := loadProgram(&attr)
	if err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		log := heapBytes(64 << 10)
		attr.logLevel, attr.logSize, attr.logBuf = 1, uint32(len(log)), addr(log)
		// Loaded again for the verifier's log; a load that passes this
		// time (the first failed for a passing reason) is kept.
		if prog, err = loadProgram(&attr); err != nil {
			err = fmt.Errorf("sockfilter: the verifier refused the filter: %v: %s", err, cString(log))
		}
		runtime.KeepAlive(log)
	} else if err != nil {
		err = fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	return prog, err
}

// loadProgram loads a program. The verifier gives up with EAGAIN when a
// signal is pending, and the Go runtime signals its threads to preempt
// them: it tries again.
func loadProgram(attr *progLoadAttr) (int, error) {
	prog, err := bpfCall(unix.BPF_PROG_LOAD, unsafe.Pointer(attr), unsafe.Sizeof(*attr))
	for try := 0; errors.Is(err, unix.EAGAIN) && try < 100; try++ {
		prog, err = bpfCall(unix.BPF_PROG_LOAD, unsafe.Pointer(attr), unsafe.Sizeof(*attr))
	}
	return prog, err
}

// program assembles the filter: drop what is sent from own (if dropOwn),
// counted in slot 1; then, for a member (me not 0), the checks of
// wire.AddressedElsewhere on the datagram, which starts at offset at,
// counted in slot 0; keep the rest.
func program(own netip.AddrPort, dropOwn bool, me uint32, counts, at int32) []insn {
	var a asm
	a.op(unix.BPF_ALU64|unix.BPF_MOV|unix.BPF_X, 6, 1, 0, 0) // r6 = the packet, as absolute loads want
	if dropOwn {
		ip := own.Addr().As4()
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_W, 0, 0, 0, netOff+12) // IPv4 source address
		a.jump(unix.BPF_JNE, binary.BigEndian.Uint32(ip[:]), "addressed")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_H, 0, 0, 0, at-udpLen) // UDP source port
		a.jump(unix.BPF_JNE, uint32(own.Port()), "addressed")
		a.countAndDrop(counts, slotOwn)
	}
	a.label("addressed")
	if me != 0 {
		a.op(unix.BPF_LDX|unix.BPF_MEM|unix.BPF_W, 0, 6, 0, 0) // r0 = skb->len (struct __sk_buff's first field)
		a.jump(unix.BPF_JLT, uint32(at+wire.HeaderLen), "keep")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_H, 0, 0, 0, at) // magic
		a.jump(unix.BPF_JNE, 'm'<<8|'c', "keep")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_B, 0, 0, 0, at+2) // version
		a.jump(unix.BPF_JNE, wire.Version, "keep")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_W, 0, 0, 0, at+wire.ForOffset)
		a.jump(unix.BPF_JEQ, 0, "keep") // for every member
		a.jump(unix.BPF_JEQ, me, "keep")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_W, 0, 0, 0, at+wire.ForOffset+4)
		a.jump(unix.BPF_JEQ, me, "keep")
		a.op(unix.BPF_LD|unix.BPF_ABS|unix.BPF_W, 0, 0, 0, at+wire.ForOffset+8)
		a.jump(unix.BPF_JEQ, me, "keep")
		a.countAndDrop(counts, slotElsewhere) // for others only
	}
	a.label("keep")
	a.op(unix.BPF_ALU|unix.BPF_MOV|unix.BPF_K, 0, 0, 0, -1) // all of it
	a.op(unix.BPF_JMP|unix.BPF_EXIT, 0, 0, 0, 0)
	return a.assemble()
}

// countAndDrop adds one to the counter in slot of the map counts, and drops
// the datagram.
func (a *asm) countAndDrop(counts int32, slot int32) {
	a.op(unix.BPF_ST|unix.BPF_MEM|unix.BPF_W, 10, 0, -4, slot) // the key, on the stack
	a.op(unix.BPF_ALU64|unix.BPF_MOV|unix.BPF_X, 2, 10, 0, 0)
	a.op(unix.BPF_ALU64|unix.BPF_ADD|unix.BPF_K, 2, 0, 0, -4)
	a.op(unix.BPF_LD|unix.BPF_IMM|unix.BPF_DW, 1, unix.BPF_PSEUDO_MAP_FD, 0, counts)
	a.op(0, 0, 0, 0, 0)                                    // the second half of the 64-bit load
	a.op(unix.BPF_JMP|unix.BPF_CALL, 0, 0, 0, 1)           // bpf_map_lookup_elem
	a.op(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 0, 0, 2, 0) // no element: drop uncounted (cannot happen)
	a.op(unix.BPF_ALU64|unix.BPF_MOV|unix.BPF_K, 1, 0, 0, 1)
	a.op(unix.BPF_STX|unix.BPF_ATOMIC|unix.BPF_DW, 0, 1, 0, unix.BPF_ADD) // lock *(u64 *)r0 += 1
	a.op(unix.BPF_ALU64|unix.BPF_MOV|unix.BPF_K, 0, 0, 0, 0)
	a.op(unix.BPF_JMP|unix.BPF_EXIT, 0, 0, 0, 0)
}

// insn is one eBPF instruction, as the kernel reads it.
type insn struct {
	code uint8
	regs uint8 // destination register in the low nibble, source in the high
	off  int16
	imm  int32
}

// asm assembles a straight program with forward jumps to labels.
type asm struct {
	insns  []insn
	labels map[string]int
	fixups map[int]string
}

func (a *asm) op(code, dst, src uint8, off int16, imm int32) {
	a.insns = append(a.insns, insn{code: code, regs: src<<4 | dst, off: off, imm: imm})
}

// jump compares r0's low 32 bits with v and jumps to label if cond holds.
func (a *asm) jump(cond uint8, v uint32, label string) {
	if a.fixups == nil {
		a.fixups = map[int]string{}
	}
	a.fixups[len(a.insns)] = label
	a.op(unix.BPF_JMP32|cond|unix.BPF_K, 0, 0, 0, int32(v))
}

func (a *asm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.insns)
}

func (a *asm) assemble() []insn {
	for at, label := range a.fixups {
		to, ok := a.labels[label]
		if !ok || to <= at {
			panic(fmt.Sprintf("sockfilter: jump to %q, which is not ahead", label)) // the code is wrong
		}
		a.insns[at].off = int16(to - at - 1)
	}
	return a.insns
}

// The parts of union bpf_attr the commands here use.
type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries, mapFlags uint32
}

type progLoadAttr struct {
	progType, insnCnt uint32
	insns, license    uint64
	logLevel, logSize uint32
	logBuf            uint64
}

type mapElemAttr struct {
	mapFD, _   uint32
	key, value uint64
	flags      uint64
}

// encode lays instructions out as the kernel reads them.
func encode(insns []insn) []byte {
	b := heapBytes(8 * len(insns))
	for i, in := range insns {
		b[8*i], b[8*i+1] = in.code, in.regs
		binary.NativeEndian.PutUint16(b[8*i+2:], uint16(in.off))
		binary.NativeEndian.PutUint32(b[8*i+4:], uint32(in.imm))
	}
	return b
}

// heapBytes allocates on the heap, where nothing moves: the kernel reads
// and writes the buffers the attributes point at, by address.
//
//go:noinline
func heapBytes(n int) []byte { return make([]byte, n) }

// addr is a buffer's address, as union bpf_attr carries it.
func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func bpfCall(cmd uintptr, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
