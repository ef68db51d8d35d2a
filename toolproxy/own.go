package toolproxy

import (
	"encoding/json"
	"fmt"
)

// nlx's own tools, which every launch's proxy exposes beside the
// workspace's: nlx answers them itself.

// ReportTool is the tool a provider reports a job's structured result
// with; the call's record keeps it with the turn.
const ReportTool = "nlx_report"

// ReportStatus is what a report says of the work.
type ReportStatus string

// The statuses a report may give.
const (
	ReportSucceeded ReportStatus = "succeeded"
	ReportFailed    ReportStatus = "failed"
	ReportPartial   ReportStatus = "partial"
)

// Report is nlx_report's input, as nlx records it.
type Report struct {
	Status  ReportStatus    `json:"status"`
	Summary string          `json:"summary"`
	Details json.RawMessage `json:"details,omitempty"`
}

// maxReport bounds a report: a result, not a payload.
const maxReport = 64 << 10

// ownTool is a tool nlx answers.
type ownTool struct {
	name string
	def  []byte
	// call answers the tool's arguments: the result, what the record
	// keeps, and whether the result is a tool error.
	call func(args json.RawMessage) (result []byte, report json.RawMessage, isError bool)
}

var ownTools = []ownTool{{
	name: ReportTool,
	def: mustJSON(map[string]any{
		"name":  ReportTool,
		"title": "Report the job's result to nlx",
		"description": "Report the structured result of this job's work to nlx, which records it with the turn for the people " +
			"who run the job. Call it once, when the work is done (or cannot be done).",
		"inputSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"status":  map[string]any{"type": "string", "enum": []ReportStatus{ReportSucceeded, ReportFailed, ReportPartial}, "description": "how the work went"},
				"summary": map[string]any{"type": "string", "description": "what was done, or why not, in a few sentences"},
				"details": map[string]any{"type": "object", "description": "any structured data worth keeping"},
			},
			"required":             []string{"status", "summary"},
			"additionalProperties": false,
		},
	}),
	call: report,
}}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// report records a valid report, and answers an invalid one with a tool
// error the model can act on.
func report(args json.RawMessage) ([]byte, json.RawMessage, bool) {
	var r Report
	if len(args) > maxReport {
		return toolText(fmt.Sprintf("the report is %d bytes; nlx keeps at most %d", len(args), maxReport), true), nil, true
	}
	if err := json.Unmarshal(args, &r); err != nil {
		return toolText("the report is not an object with status and summary: "+err.Error(), true), nil, true
	}
	switch r.Status {
	case ReportSucceeded, ReportFailed, ReportPartial:
	default:
		return toolText(fmt.Sprintf("status %q is not one of succeeded, failed, partial", r.Status), true), nil, true
	}
	if r.Summary == "" {
		return toolText("the summary is empty", true), nil, true
	}
	if len(r.Details) > 0 && r.Details[0] != '{' {
		return toolText("details must be an object", true), nil, true
	}
	kept, err := json.Marshal(r)
	if err != nil {
		return toolText(err.Error(), true), nil, true
	}
	return toolText("nlx recorded the report.", false), kept, false
}

// toolText is a tool result of one text.
func toolText(text string, isError bool) []byte {
	res := map[string]any{"content": []map[string]string{{"type": "text", "text": text}}}
	if isError {
		res["isError"] = true
	}
	return mustJSON(res)
}
