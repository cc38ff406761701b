package replicas

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// led is how many buckets of each reconciler this replica leads, as far as
// it knows, by reconciler: its work queue's name, as in its bucket Leases'
// names (without the component).
func (s *bucketShares) led() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	led := map[string]int{}
	for n, l := range s.seen {
		if g, _, ok := s.bucketOf(n); ok {
			reconciler := strings.TrimPrefix(g, s.component+".")
			led[reconciler] += 0
			if l.holder == s.id && l.held(now) {
				led[reconciler]++
			}
		}
	}
	return led
}

func (s *bucketShares) registerMetrics() error {
	meter := otel.Meter("buildsmith.dev/leaderelection")
	gauge, err := meter.Int64ObservableGauge("buildsmith.leader.buckets",
		metric.WithDescription("Buckets this replica leads, by reconciler (its work queue's name, as in its bucket Leases' names): 0 for a replica standing by."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for reconciler, n := range s.led() {
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(attribute.String("reconciler", reconciler)))
		}
		return nil
	}, gauge)
	return err
}
