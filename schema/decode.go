package schema

import (
	"encoding/json"
	"fmt"
)

// decodeJSON turns the JSON export of an accepted config into a Config,
// filling what schema.cue gives when a field is absent: defaults and empty
// structs and lists.
func decodeJSON(data []byte) (*Config, error) {
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if cfg.Host != nil && cfg.Host.Operators == nil {
		cfg.Host.Operators = []string{}
	}
	if cfg.Host != nil && cfg.Host.Retention != nil && cfg.Host.Retention.Days == 0 {
		cfg.Host.Retention.Days = DefaultRetentionDays
	}
	for _, w := range cfg.Workspaces {
		if w.Members == nil {
			w.Members = map[string]string{}
		}
	}
	for _, im := range cfg.Images {
		if im.Layers == nil {
			im.Layers = []Layer{}
		}
	}
	for _, p := range cfg.Preservations {
		if p.Expected.Counts == nil {
			p.Expected.Counts = map[string]int64{}
		}
		if p.ChatReset == nil {
			p.ChatReset = map[string]string{}
		}
	}
	return &cfg, nil
}

// UnmarshalJSON fills the schema's default status.
func (p *Provider) UnmarshalJSON(b []byte) error {
	type plain Provider
	x := plain{Status: "disabled"}
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*p = Provider(x)
	return nil
}

// UnmarshalJSON fills the schema's defaults of a job.
func (j *Job) UnmarshalJSON(b []byte) error {
	type plain Job
	x := plain{Enabled: true, Concurrency: "skip", CatchUp: "skip"}
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*j = Job(x)
	return nil
}

// UnmarshalJSON fills the schema's default egress of a tool.
func (t *Tool) UnmarshalJSON(b []byte) error {
	type plain Tool
	x := plain{Egress: "none"}
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*t = Tool(x)
	return nil
}
