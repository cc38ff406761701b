package main

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/buildsmith/buildsmith/pkg/registry"
)

// registerRegistryMetrics exposes the registry client's accounting and the
// registries' health as metrics, read when metrics are collected.
func registerRegistryMetrics(client *registry.Client) error {
	meter := otel.Meter("buildsmith.dev/registry")
	requests, err := meter.Int64ObservableCounter("buildsmith.registry.requests",
		metric.WithDescription("Requests to registries (each in-call retry counted), by host, method and status class."))
	if err != nil {
		return err
	}
	bytes, err := meter.Int64ObservableCounter("buildsmith.registry.bytes",
		metric.WithDescription("Bytes sent to and received from registries, by host and direction."), metric.WithUnit("By"))
	if err != nil {
		return err
	}
	down, err := meter.Int64ObservableGauge("buildsmith.registry.down",
		metric.WithDescription("1 for each registry that cannot be reached (objects wait on its recovery)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		stats := client.Stats()
		for k, n := range stats.Requests {
			o.ObserveInt64(requests, n, metric.WithAttributes(attribute.String("host", k.Host),
				attribute.String("method", k.Method), attribute.String("status", k.Status)))
		}
		for host, n := range stats.BytesUp {
			o.ObserveInt64(bytes, n, metric.WithAttributes(attribute.String("host", host), attribute.String("direction", "up")))
		}
		for host, n := range stats.BytesDown {
			o.ObserveInt64(bytes, n, metric.WithAttributes(attribute.String("host", host), attribute.String("direction", "down")))
		}
		for _, host := range client.Health().Down() {
			o.ObserveInt64(down, 1, metric.WithAttributes(attribute.String("host", host)))
		}
		return nil
	}, requests, bytes, down)
	return err
}
