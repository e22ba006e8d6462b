package quorumfallback

// Outbox collects what a machine produces. Messages for other nodes wait
// for Ready; a message to the node itself is queued for local delivery,
// because a node is usually in its own quorum and the papers treat that
// exchange as free and immediate.
type Outbox struct {
	Self    ID
	msgs    []Message
	local   []Message
	entered bool
	token   uint64
}

// Send queues m, From filled in.
func (o *Outbox) Send(m Message) {
	m.From = o.Self
	if m.To == o.Self {
		o.local = append(o.local, m)
		return
	}
	o.msgs = append(o.msgs, m)
}

// Deliver hands each message the node sent itself to step, in order,
// including those step sends in turn.
func (o *Outbox) Deliver(step func(Message)) {
	for len(o.local) > 0 {
		m := o.local[0]
		o.local = o.local[1:]
		step(m)
	}
}

// Enter records that the node entered the critical section with token.
func (o *Outbox) Enter(token uint64) {
	o.entered = true
	o.token = token
}

// Ready takes what accumulated.
func (o *Outbox) Ready() Ready {
	rd := Ready{Messages: o.msgs, Entered: o.entered, Token: o.token}
	o.msgs, o.entered, o.token = nil, false, 0
	return rd
}
