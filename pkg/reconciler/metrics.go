package reconciler

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Reconcile metrics, through OpenTelemetry's global meter provider, which
// knative's sharedmain sets up from config-observability (Prometheus on
// --metrics-port when metrics-protocol is "prometheus"). Instruments made
// before that are bound to it when it is set.
var (
	meter = otel.Meter("buildsmith.dev/reconciler")

	reconciles, _ = meter.Int64Counter("buildsmith.reconciles",
		metric.WithDescription("Reconciles by kind and outcome: ready, stale (a usable object kept Ready through a passing failure), transient, waiting or permanent."))
	requeueDelays, _ = meter.Float64Histogram("buildsmith.requeue.delay",
		metric.WithDescription("The delay before an object is reconciled again, by kind and outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.5, 1, 2, 4, 8, 16, 32, 64, 128, 300, 600, 1200))
)

// record counts a reconcile of p's kind that ended with outcome, to be tried
// again after delay (0: not by itself).
func (p *Policy) record(ctx context.Context, outcome string, delay time.Duration) {
	p.states.reconciled(time.Now())
	attrs := metric.WithAttributes(attribute.String("kind", p.kind), attribute.String("outcome", outcome))
	reconciles.Add(ctx, 1, attrs)
	if delay > 0 {
		requeueDelays.Record(ctx, delay.Seconds(), attrs)
	}
}
