package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"go.uber.org/zap"
)

// An egress sandbox gets a network of its own and a proxy container
// (docs/security.md, "Egress"):
//
//   - the network is an internal bridge with no address on the host side
//     (com.docker.network.bridge.inhibit_ipv4): the box has no route to the
//     host, to other boxes or anywhere else; its only neighbour is its
//     proxy. Inter-container traffic stays enabled on it because the box
//     must reach the proxy, and the box and its proxy are all it holds.
//   - the proxy container runs plumb-egress (Config.EgressProxy, imported
//     into an image of its own) on that network, under the alias
//     EgressProxyHost, and on the engine's default bridge for its way out.
//     It vets every destination (pkg/egress) against the policy's
//     egress_allow and egress_deny, the host's addresses and the private
//     and reserved ranges, and answers 403 with a reason.
//   - the box gets HTTP_PROXY, HTTPS_PROXY (and lower-case forms) naming the
//     proxy.
//   - the box's DNS server (HostConfig.DNS) is its network's gateway
//     address, which nothing holds (egressDNS): the engine's embedded
//     resolver answers the proxy's name and has no upstream it can reach
//     for any other name, whatever the host's resolv.conf says.
//
// Neither carries LabelWorker or LabelSandbox (the adopt loop would take
// them for sandboxes); they carry LabelEgressFor and LabelEgressWorker,
// and the collector removes those of no live sandbox.
const (
	// LabelEgressFor names the sandbox an egress network or proxy serves.
	LabelEgressFor = "plumb.egress-for"
	// LabelEgressWorker names the worker that made it.
	LabelEgressWorker = "plumb.egress-worker"
	// EgressProxyHost is the proxy's name on the box's network.
	EgressProxyHost = "plumb-egress"
	// EgressProxyPort is the port it serves.
	EgressProxyPort = 3128
	// egressImageRepo is the repository of the proxy image.
	egressImageRepo = "plumb-egress-proxy"
	// egressUser runs the proxy (no file of the image is its).
	egressUser = "65532:65532"
	// egressOutNetwork is the proxy's way out: the engine's default bridge.
	egressOutNetwork = "bridge"
)

// Bounds of a proxy container and of the connections it serves.
const (
	egressMemoryBytes = 64 << 20
	egressPids        = 64
	// EgressMaxConns is how many connections a box may hold open through
	// its proxy at once.
	EgressMaxConns = 64
	// EgressIdleTimeout closes a connection idle this long.
	EgressIdleTimeout = 5 * time.Minute
)

// egressEnv is what an egress box gets in its environment.
func egressEnv() []string {
	u := "http://" + EgressProxyHost + ":" + strconv.Itoa(EgressProxyPort)
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1"}
}

func egressNetwork(id string) string   { return "plumb-egress-" + id }
func egressProxyName(id string) string { return id + "-egress" }

// egressLabels label a sandbox's network and proxy.
func (m *Manager) egressLabels(id string) map[string]string {
	l := map[string]string{LabelEgressFor: id, LabelEgressWorker: m.cfg.Worker}
	maps.Copy(l, m.cfg.ExtraLabels)
	return l
}

// egressImage returns the ID of the proxy image, importing it from
// Config.EgressProxy when the engine lacks it.
func (m *Manager) egressImage(ctx context.Context) (string, error) {
	if len(m.cfg.EgressProxy) == 0 {
		return "", errorf(CodeInvalid, "network egress is not available on worker %s: it has no plumb-egress proxy binary (--egress-proxy-binary)", m.cfg.Worker)
	}
	return m.importBinary(ctx, &m.egressImg, egressImageRepo, m.egressKey(), m.cfg.Worker, "plumb-egress", m.cfg.EgressProxy,
		[]string{`ENTRYPOINT ["/plumb-egress"]`, "USER " + egressUser}, "plumb egress proxy")
}

// egressTag is this worker's tag of the proxy image of its binary (see
// ownTag: only its own tags are collected).
func (m *Manager) egressTag() string { return ownTag(egressImageRepo, m.egressKey(), m.cfg.Worker) }

// egressKey is the content key of the proxy image: its binary's sum.
func (m *Manager) egressKey() string {
	sum := sha256.Sum256(m.cfg.EgressProxy)
	return hex.EncodeToString(sum[:8])
}

// setupEgress creates sandbox id's network and starts its proxy; the box
// container is created on the network afterwards, with the returned
// address as its only DNS server (egressDNS). On error the caller removes
// whatever was created (removeEgress).
func (m *Manager) setupEgress(ctx context.Context, id string, inj *injection) (dns netip.Addr, err error) {
	if _, err := m.egressImage(ctx); err != nil {
		return dns, err
	}
	_, err = m.api.NetworkCreate(ctx, egressNetwork(id), client.NetworkCreateOptions{
		Driver:   "bridge",
		Internal: true,
		Options: map[string]string{
			// No address on the host side: the box cannot reach the host
			// (nor route anywhere through it).
			"com.docker.network.bridge.inhibit_ipv4": "true",
		},
		Labels: m.egressLabels(id),
	})
	if err != nil {
		return dns, fmt.Errorf("create egress network: %w", err)
	}
	ni, err := m.api.NetworkInspect(ctx, egressNetwork(id), client.NetworkInspectOptions{})
	if err != nil {
		return dns, fmt.Errorf("inspect egress network: %w", err)
	}
	if dns, err = egressDNS(ni.Network); err != nil {
		return dns, err
	}
	return dns, m.startProxy(ctx, id, inj)
}

// egressDNS is the DNS server an egress box is given: its network's
// gateway address. With inhibit_ipv4 no interface holds it (the bridge has
// no address and IPAM never hands the gateway to a container), so a query
// the engine's embedded resolver forwards for the box, from the box's
// network namespace, reaches no one.
//
// Naming a server matters even though it answers nothing: without one the
// resolver forwards to the host's resolv.conf servers, and a loopback
// server there (a local dnsmasq, unbound, 127.0.0.1) is queried from the
// engine's own namespace, past the internal network (measured on Engine
// 20.10; CVE-2024-29018, fixed in Engine 23.0.11, 25.0.4 and 26.0). Servers
// named in HostConfig.DNS are always queried from the container's
// namespace.
func egressDNS(n network.Inspect) (netip.Addr, error) {
	for _, c := range n.IPAM.Config {
		if !c.Subnet.Addr().Is4() {
			continue
		}
		if c.Gateway.IsValid() {
			return c.Gateway, nil
		}
		// IPAM's default gateway: the subnet's first address.
		return c.Subnet.Masked().Addr().Next(), nil
	}
	return netip.Addr{}, fmt.Errorf("egress network %s has no IPv4 subnet", n.Name)
}

// startProxy creates and starts sandbox id's proxy container on its
// network (which must exist) and on the way-out bridge. With inj, its
// injection config is copied in before it starts.
func (m *Manager) startProxy(ctx context.Context, id string, inj *injection) error {
	image, err := m.egressImage(ctx)
	if err != nil {
		return err
	}
	netName := egressNetwork(id)
	ni, err := m.api.NetworkInspect(ctx, netName, client.NetworkInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect egress network: %w", err)
	}
	// --control: sandboxd attaches to the proxy's stdin and stdout to
	// approve egress (egress_ask.go); asking stays off until it does.
	args := []string{"--sandbox", id, "--control", "--listen", ":" + strconv.Itoa(EgressProxyPort),
		"--max-conns", strconv.Itoa(EgressMaxConns), "--idle-timeout", EgressIdleTimeout.String()}
	for _, c := range ni.Network.IPAM.Config {
		if c.Subnet.IsValid() {
			args = append(args, "--clients", c.Subnet.String())
		}
	}
	for _, a := range m.cfg.Policy.EgressAllow {
		args = append(args, "--allow", a)
	}
	for _, d := range append(m.hostAddrs(ctx), m.cfg.Policy.EgressDeny...) {
		args = append(args, "--deny", d)
	}
	if inj != nil {
		args = append(args, "--inject-config", injectConfigPath)
	}
	pids := int64(egressPids)
	noInit := false
	c, err := m.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: egressProxyName(id),
		Config: &container.Config{
			Image:  image,
			User:   egressUser,
			Cmd:    args,
			Labels: m.egressLabels(id),
			// The control channel's end; a detach leaves stdin open.
			OpenStdin: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode(netName),
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges:true"},
			// The engine refuses to copy into a read-only root; the
			// proxy's user owns no file or directory of it anyway.
			ReadonlyRootfs: inj == nil,
			IpcMode:        container.IPCModePrivate,
			Init:           &noInit,
			// Refusals are logged here, with the sandbox id; the log is
			// bounded however fast the box makes the proxy refuse.
			LogConfig:     container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
			Resources: container.Resources{
				Memory: egressMemoryBytes, MemorySwap: egressMemoryBytes, NanoCPUs: 1e9, PidsLimit: &pids,
				Ulimits: []*container.Ulimit{{Name: "nofile", Soft: NofileSoft, Hard: NofileHard}},
			},
		},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			netName: {Aliases: []string{EgressProxyHost}},
		}},
	})
	if err != nil {
		return fmt.Errorf("create egress proxy: %w", err)
	}
	if inj != nil {
		if err := m.copyInjectConfig(ctx, c.ID, inj.config); err != nil {
			return err
		}
	}
	if _, err := m.api.NetworkConnect(ctx, egressOutNetwork, client.NetworkConnectOptions{Container: c.ID}); err != nil {
		return fmt.Errorf("connect egress proxy to %s: %w", egressOutNetwork, err)
	}
	if _, err := m.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start egress proxy: %w", err)
	}
	return nil
}

// hostAddrs are the addresses the proxy refuses as the host's own: every
// address of the worker's interfaces (the host's, when the worker shares
// its network namespace) and the gateway and subnet of every engine
// network.
func (m *Manager) hostAddrs(ctx context.Context) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p netip.Prefix) {
		if p.IsValid() && !seen[p.String()] {
			seen[p.String()] = true
			out = append(out, p.String())
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				add(netip.PrefixFrom(p.Addr().Unmap(), p.Addr().Unmap().BitLen()))
			}
		}
	}
	if list, err := m.api.NetworkList(ctx, client.NetworkListOptions{}); err == nil {
		for _, n := range list.Items {
			for _, c := range n.IPAM.Config {
				if c.Gateway.IsValid() {
					add(netip.PrefixFrom(c.Gateway, c.Gateway.BitLen()))
				}
				add(c.Subnet)
			}
		}
	}
	return out
}

// ensureProxy re-creates the proxy of an adopted egress sandbox whose
// proxy is gone or stopped. It returns an error when the sandbox's network
// itself is gone (the box then has no way out), and when the proxy of a
// box that injects secrets is gone (errProxyGone).
func (m *Manager) ensureProxy(ctx context.Context, id string, injects bool) error {
	if _, err := m.api.NetworkInspect(ctx, egressNetwork(id), client.NetworkInspectOptions{}); err != nil {
		return fmt.Errorf("egress network %s: %w", egressNetwork(id), err)
	}
	res, err := m.api.ContainerInspect(ctx, egressProxyName(id), client.ContainerInspectOptions{})
	if err == nil && res.Container.State != nil && res.Container.State.Running {
		return nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect egress proxy: %w", err)
	}
	if injects {
		if err == nil { // stopped, not gone: the engine still has its config
			if _, err := m.api.ContainerStart(ctx, res.Container.ID, client.ContainerStartOptions{}); err != nil {
				return fmt.Errorf("restart egress proxy: %w", err)
			}
			return nil
		}
		return errProxyGone
	}
	m.lg.Info("re-creating egress proxy", zap.String("sandbox-id", id))
	m.removeContainerOnly(ctx, egressProxyName(id))
	return m.startProxy(ctx, id, nil)
}

// removeEgress removes sandbox id's proxy and network (the box container
// must be gone first: a network with endpoints cannot be removed).
func (m *Manager) removeEgress(ctx context.Context, id string) {
	m.removeContainerOnly(ctx, egressProxyName(id))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := m.api.NetworkRemove(ctx, egressNetwork(id), client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		m.lg.Warn("remove egress network", zap.String("sandbox-id", id), zap.Error(err))
	}
}

// sweepEgress removes this worker's egress proxies and networks whose
// sandbox is neither live nor being created.
func (m *Manager) sweepEgress(ctx context.Context) error {
	f := client.Filters{}.Add("label", LabelEgressWorker+"="+m.cfg.Worker)
	live := func(id string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		sb := m.sandboxes[id]
		return m.pending[id] || sb != nil && sb.info.Settings.Network == NetworkEgress
	}
	cl, err := m.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("list egress proxies: %w", err)
	}
	for _, c := range cl.Items {
		if id := c.Labels[LabelEgressFor]; !live(id) {
			m.lg.Info("removing orphan egress proxy", zap.String("sandbox-id", id), zap.String("container-id", c.ID))
			m.removeContainerOnly(ctx, c.ID)
		}
	}
	nl, err := m.api.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("list egress networks: %w", err)
	}
	for _, n := range nl.Items {
		if id := n.Labels[LabelEgressFor]; !live(id) && strings.HasPrefix(n.Name, "plumb-egress-") {
			m.lg.Info("removing orphan egress network", zap.String("sandbox-id", id), zap.String("network", n.Name))
			if _, err := m.api.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				m.lg.Warn("remove egress network", zap.String("network", n.Name), zap.Error(err))
			}
		}
	}
	// This worker's tags of proxy images of other binaries (an earlier
	// version of it), once old enough that no create is about to use
	// them; other workers' tags keep an image they share, and the engine
	// refuses to remove one a container still uses.
	il, err := m.api.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", egressImageRepo)})
	if err != nil {
		return fmt.Errorf("list egress proxy images: %w", err)
	}
	current := m.egressTag()
	for _, img := range il.Items {
		if m.now().Sub(time.Unix(img.Created, 0)) < deriveGrace {
			continue
		}
		for _, t := range img.RepoTags {
			if _, mine := ownedKey(t, egressImageRepo, m.cfg.Worker); !mine || t == current {
				continue
			}
			if _, err := m.api.ImageRemove(ctx, t, client.ImageRemoveOptions{}); err == nil {
				m.lg.Info("removed superseded egress proxy image", zap.String("tag", t))
			}
		}
	}
	return nil
}
