package netns

import (
	"context"
	"fmt"
)

// Veth is a veth pair with one end (Inside) in a namespace. Interface
// names have at most 15 bytes (IFNAMSIZ).
type Veth struct {
	Outside, Inside string
	// InsideAddr is the inside end's address with its prefix length
	// ("10.0.0.2/24").
	InsideAddr string
	// OutsideAddr, if set, is the outside end's address with its prefix
	// length; Bridge, if set, is the bridge the outside end joins.
	OutsideAddr string
	Bridge      string
}

// AddVeth creates the pair, moves the inside end into ns, gives each end
// its address, joins the outside end to its bridge and sets both up. On
// failure it removes what it created.
func AddVeth(ctx context.Context, ns *Namespace, v Veth) error {
	steps := [][]string{
		{"ip", "link", "add", v.Outside, "type", "veth", "peer", "name", v.Inside},
		{"ip", "link", "set", v.Inside, "netns", ns.Name},
	}
	if v.OutsideAddr != "" {
		steps = append(steps, []string{"ip", "addr", "add", v.OutsideAddr, "dev", v.Outside})
	}
	if v.Bridge != "" {
		steps = append(steps, []string{"ip", "link", "set", v.Outside, "master", v.Bridge})
	}
	steps = append(steps,
		[]string{"ip", "link", "set", v.Outside, "up"},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "addr", "add", v.InsideAddr, "dev", v.Inside},
		[]string{"ip", "netns", "exec", ns.Name, "ip", "link", "set", v.Inside, "up"})
	for _, s := range steps {
		if err := Run(ctx, s...); err != nil {
			_ = DeleteLink(ctx, v.Outside)
			return fmt.Errorf("veth %s-%s into %s: %w", v.Outside, v.Inside, ns.Name, err)
		}
	}
	return nil
}

// AddBridge creates a bridge with an address (with its prefix length; the
// host reaches every namespace on the bridge through it) and sets it up.
func AddBridge(ctx context.Context, name, addr string) error {
	for _, s := range [][]string{
		{"ip", "link", "add", name, "type", "bridge"},
		{"ip", "addr", "add", addr, "dev", name},
		{"ip", "link", "set", name, "up"},
	} {
		if err := Run(ctx, s...); err != nil {
			_ = DeleteLink(ctx, name)
			return fmt.Errorf("bridge %s: %w", name, err)
		}
	}
	return nil
}

// SetLink sets an interface of the host up or down. Down on the outside
// end of a veth drops every packet to and from its namespace: connections
// stall, new ones time out, as behind a real partition. Up heals.
func SetLink(ctx context.Context, name string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return Run(ctx, "ip", "link", "set", name, state)
}

// DeleteLink removes an interface of the host (a veth goes with its peer).
func DeleteLink(ctx context.Context, name string) error {
	return Run(ctx, "ip", "link", "del", name)
}
