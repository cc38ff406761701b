package turns

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// The turns' metrics (knative's workqueue metrics see only the hand-over
// to them), through OpenTelemetry's global meter provider. The meter is the
// reconcilers' (pkg/reconciler): its name is the instrumentation scope the
// exported series carry, as they did when the turns were part of it.
var (
	meter = otel.Meter("buildsmith.dev/reconciler")

	turnsQueued, _ = meter.Int64UpDownCounter("buildsmith.turns.queued",
		metric.WithDescription("Keys waiting for a worker in the turns, by kind."))
	turnsWait, _ = meter.Float64Histogram("buildsmith.turns.wait",
		metric.WithDescription("How long a key waited for a worker, by kind."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300))
	turnsLent, _ = meter.Int64Counter("buildsmith.turns.lent",
		metric.WithDescription("Reconciles that lent their worker while waiting on a registry, by kind."))
)
