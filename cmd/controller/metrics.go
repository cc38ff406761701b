package main

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/buildsmith/buildsmith/pkg/registry"
)

// registerRegistryMetrics exposes the registry client's accounting and the
// circuits of failing places as metrics, read when metrics are collected.
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
	open, err := meter.Int64ObservableGauge("buildsmith.registry.circuits.open",
		metric.WithDescription("Open circuits (places failing: the registry itself, or a repository), by host and scope."))
	if err != nil {
		return err
	}
	waiters, err := meter.Int64ObservableGauge("buildsmith.registry.circuits.waiters",
		metric.WithDescription("Objects waiting for a failing place to answer again, by host."))
	if err != nil {
		return err
	}
	probes, err := meter.Int64ObservableCounter("buildsmith.registry.circuits.probes",
		metric.WithDescription("Probes of failing places, by host and result (answered or failed)."))
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
		type scoped struct{ host, scope string }
		openBy, waitingBy := map[scoped]int64{}, map[string]int64{}
		for _, c := range client.Circuits().Open() {
			scope := "repository"
			if c.Place.Repository == "" {
				scope = "registry"
			}
			host := client.HostLabel(c.Place.Host) // tenants choose hosts: bounded series
			openBy[scoped{host, scope}]++
			waitingBy[host] += int64(c.Waiters)
		}
		for k, n := range openBy {
			o.ObserveInt64(open, n, metric.WithAttributes(attribute.String("host", k.host), attribute.String("scope", k.scope)))
		}
		for host, n := range waitingBy {
			o.ObserveInt64(waiters, n, metric.WithAttributes(attribute.String("host", host)))
		}
		for k, n := range client.Circuits().ProbeResults() {
			result := "failed"
			if k.Answered {
				result = "answered"
			}
			o.ObserveInt64(probes, n, metric.WithAttributes(attribute.String("host", k.Host), attribute.String("result", result)))
		}
		return nil
	}, requests, bytes, open, waiters, probes)
	return err
}
