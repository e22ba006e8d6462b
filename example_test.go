package mcnode_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// Three nodes share a lock and an update, in the mode one value chooses:
// change mode to mcnode.Quorum and nothing else changes. The nodes talk
// over in-memory networks here, so that the example runs anywhere; on a
// LAN, leave the Transport fields unset (see group.DefaultLANConfig).
func Example() {
	mode := mcnode.Multicast // or mcnode.Quorum

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := startGroup(ctx, mode, 3)
	defer func() {
		for _, n := range nodes {
			n.Leave(ctx)
		}
	}()

	scores, stop := nodes[2].Subscribe("score")
	defer stop()

	lease, err := nodes[0].Acquire(ctx, "printer")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node 0 holds", lease.Name())
	if _, err := nodes[1].TryAcquire(ctx, "printer"); errors.Is(err, mcnode.ErrLocked) {
		fmt.Println("node 1 finds it taken")
	}
	if err := nodes[0].Publish("score", []byte("node 0 printed")); err != nil {
		log.Fatal(err)
	}
	fmt.Println("node 2 hears:", string((<-scores).Data))
	lease.Release()

	next, err := nodes[1].Acquire(ctx, "printer")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("node 1 holds it, with a higher fencing token:", next.Token() > lease.Token())
	next.Release()
	// Output:
	// node 0 holds printer
	// node 1 finds it taken
	// node 2 hears: node 0 printed
	// node 1 holds it, with a higher fencing token: true
}

// startGroup starts n nodes of one group on an in-memory network.
func startGroup(ctx context.Context, mode mcnode.Mode, n int) []mcnode.Locker {
	mem := memnet.New(1)
	ends := qnet.NewMemNetwork(n)
	peers := make([]string, n)
	for i := range peers {
		peers[i] = fmt.Sprintf("node-%d", i)
	}
	var nodes []mcnode.Locker
	for i := range n {
		cfg := mcnode.Config{Mode: mode, Multicast: group.DefaultLocalConfig(),
			Quorum: node.Config{Group: "example", Protocol: "maekawa", Coterie: "grid", Self: i, Peers: peers, Transport: ends[i]}}
		cfg.Multicast.Name, cfg.Multicast.Transport = "example", mem.Endpoint()
		l, err := mcnode.Start(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, l)
	}
	return nodes
}
