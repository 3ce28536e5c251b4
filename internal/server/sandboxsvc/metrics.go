package sandboxsvc

import (
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/prometheus/client_golang/prometheus"
)

// PoolReporter is what the pool metrics read: the manager's pool state.
type PoolReporter interface {
	Pools() []sandbox.PoolState
}

// poolCollector exports the warm pools' state at every scrape.
type poolCollector struct {
	m                         PoolReporter
	hits, misses, ready, size *prometheus.Desc
}

// NewPoolCollector returns a Prometheus collector of the warm pools, by
// template (empty for the pool of the worker's defaults):
// plumb_sandbox_pool_hits_total and plumb_sandbox_pool_misses_total
// (creates served from the pool, and creates that matched it but found no
// ready box), plumb_sandbox_pool_ready and plumb_sandbox_pool_size.
func NewPoolCollector(m PoolReporter) prometheus.Collector {
	l := []string{"template"}
	return &poolCollector{
		m:      m,
		hits:   prometheus.NewDesc("plumb_sandbox_pool_hits_total", "Sandbox creates served from a warm pool.", l, nil),
		misses: prometheus.NewDesc("plumb_sandbox_pool_misses_total", "Sandbox creates that matched a warm pool but found no ready box and started one cold.", l, nil),
		ready:  prometheus.NewDesc("plumb_sandbox_pool_ready", "Warm-pool boxes ready to be claimed.", l, nil),
		size:   prometheus.NewDesc("plumb_sandbox_pool_size", "Configured size of a warm pool.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hits
	ch <- c.misses
	ch <- c.ready
	ch <- c.size
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.m.Pools() {
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(p.Hits), p.Template)
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(p.Misses), p.Template)
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(p.Ready), p.Template)
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(p.Size), p.Template)
	}
}

// TransferReporter is what the transfer metric reads.
type TransferReporter interface {
	Transfers() sandbox.TransferCounts
}

// transferCollector exports the manager's transfer counts at every scrape.
type transferCollector struct {
	m     TransferReporter
	count *prometheus.Desc
}

// NewTransferCollector returns a Prometheus collector of
// plumb_sandbox_transfers_total by path: "lent", the bytes moved through
// the agent's open file (docs/security.md, "Bulk bytes through the agent's
// open file"), or "channel", sent as chunks over the agent channel. An
// operator who expects lent transfers (runc, a worker on the engine's
// host with CAP_SYS_PTRACE) and sees only channel ones has a worker that
// cannot borrow.
func NewTransferCollector(m TransferReporter) prometheus.Collector {
	return &transferCollector{m: m, count: prometheus.NewDesc("plumb_sandbox_transfers_total",
		"Uploads and downloads of more than one chunk, by the path their bytes took.", []string{"path"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *transferCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.count }

// Collect implements prometheus.Collector.
func (c *transferCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.m.Transfers()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.CounterValue, float64(n.Lent), "lent")
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.CounterValue, float64(n.Channel), "channel")
}
