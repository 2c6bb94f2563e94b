package receiver

import (
	"reflect"
	"strings"

	"github.com/gpuprobe/gpuprobe/receiver/internal/metadata"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// metricView is what of the metrics output the configuration keeps: the
// metrics and resource attributes of metadata.yaml turned off under
// metrics::<name>::enabled and resource_attributes::<name>::enabled.
// Metrics metadata.yaml does not list (histograms, user maps,
// self-metrics) are always kept.
type metricView struct {
	off      map[string]bool // metric names turned off
	resource []string        // resource attribute keys turned off
}

// newMetricView reads the enabled flags of every metric and resource
// attribute of c by their mapstructure names, so a metric added to
// metadata.yaml needs no code here.
func newMetricView(c metadata.MetricsBuilderConfig) metricView {
	v := metricView{off: map[string]bool{}}
	for name, on := range enabledFlags(reflect.ValueOf(c.Metrics)) {
		if !on {
			v.off[name] = true
		}
	}
	for name, on := range enabledFlags(reflect.ValueOf(c.ResourceAttributes)) {
		if !on {
			v.resource = append(v.resource, name)
		}
	}
	return v
}

// enabledFlags maps each field's mapstructure name to its Enabled field.
func enabledFlags(s reflect.Value) map[string]bool {
	out := map[string]bool{}
	for i := range s.NumField() {
		name, _, _ := strings.Cut(s.Type().Field(i).Tag.Get("mapstructure"), ",")
		if f := s.Field(i).FieldByName("Enabled"); name != "" && f.IsValid() && f.Kind() == reflect.Bool {
			out[name] = f.Bool()
		}
	}
	return out
}

// apply drops the metrics and resource attributes turned off from md, and
// the resources and scopes left with no metric.
func (v metricView) apply(md pmetric.Metrics) {
	if len(v.off) == 0 && len(v.resource) == 0 {
		return
	}
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		for _, k := range v.resource {
			rm.Resource().Attributes().Remove(k)
		}
		rm.ScopeMetrics().RemoveIf(func(sm pmetric.ScopeMetrics) bool {
			sm.Metrics().RemoveIf(func(m pmetric.Metric) bool { return v.off[m.Name()] })
			return sm.Metrics().Len() == 0
		})
		return rm.ScopeMetrics().Len() == 0
	})
}
