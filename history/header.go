package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// HeaderMagic is the value of the "header" field of the headers coordtorture
// writes.
const HeaderMagic = "coordtorture"

// Header is the optional first line of a history: the expectations of the
// run that recorded it, so that an offline check (fencecheck) runs the run's
// checkers with the run's options and reaches the run's verdict. Histories
// from other producers usually have none. FORMAT.md describes its fields.
type Header struct {
	// Header marks the line as a header; coordtorture writes HeaderMagic.
	Header string `json:"header"`
	// Version is the header's format version (1).
	Version int `json:"version,omitempty"`
	// Scenario, Impl and Build name the run: scenario, implementation under
	// test, server build.
	Scenario string `json:"scenario,omitempty"`
	Impl     string `json:"impl,omitempty"`
	Build    string `json:"build,omitempty"`
	// Seed is the run's seed (coordtorture run --seed reproduces it).
	Seed int64 `json:"seed,omitempty"`
	// Clients is the number of client processes, DurationNs the workload's
	// duration and TTLMs the lease duration.
	Clients    int   `json:"clients,omitempty"`
	DurationNs int64 `json:"duration_ns,omitempty"`
	TTLMs      int64 `json:"ttl_ms,omitempty"`
	// Nemesis says the scenario injects faults; FaultsScheduled is how many
	// nemesis events its schedule had for this run. A check counts the
	// nemesis operations of the history against it: a fault that did not
	// happen leaves the run UNKNOWN, and so does a nemesis that scheduled
	// none.
	Nemesis         bool `json:"nemesis,omitempty"`
	FaultsScheduled int  `json:"faults_scheduled,omitempty"`
	// Options are the checker options the run used, as package models
	// encodes them (models.Options).
	Options json.RawMessage `json:"options,omitempty"`
	// Properties are the run's properties, in the run's order.
	Properties []HeaderProperty `json:"properties,omitempty"`
}

// HeaderProperty is one property of a run. It carries data, never a
// verdict: an offline check recomputes every property from the history and
// this data (package models), or says it cannot.
type HeaderProperty struct {
	// Checker names a checker of package models.
	Checker string `json:"checker"`
	// Expect is "must-hold" or "may-show-hazard".
	Expect string `json:"expect"`
	// HazardKinds are the violation kinds counted as the hazard (a
	// may-show-hazard property).
	HazardKinds []string `json:"hazard_kinds,omitempty"`
	// NotChecked says why the run had nothing for this property to check
	// (an implementation that hands out no fencing tokens, a deployment
	// whose servers the harness does not scan): the property is N/A with
	// this reason when the history indeed holds nothing its checker reads
	// (no leak_scan, no token), else it is checked.
	NotChecked string `json:"not_checked,omitempty"`
	// Reads are what the run read from the servers after the workload for
	// this property (the final state a history's operations cannot show):
	// data its checker judges, with the history.
	Reads []ServerRead `json:"reads,omitempty"`
}

// ServerRead is one read of a server's state after a run: which node, key
// and member it read and the reply, or the error that left it unread.
type ServerRead struct {
	// Node names the server read ("" when the read found none to ask).
	Node string `json:"node,omitempty"`
	// Key and Member are what was read, named as the history names them (a
	// member: an owner in a sorted set, a field of a hash).
	Key    string `json:"key"`
	Member string `json:"member,omitempty"`
	// Reply is what the server answered, in words the property's checker
	// documents ("absent", a score, a count).
	Reply string `json:"reply,omitempty"`
	// Err says why the read failed (Reply is then meaningless).
	Err string `json:"err,omitempty"`
}

// AppendHeader appends h as one JSON line (with its '\n'), "header" first.
func AppendHeader(b []byte, h *Header) ([]byte, error) {
	if h.Header == "" {
		c := *h
		c.Header = HeaderMagic
		h = &c
	}
	j, err := json.Marshal(h)
	if err != nil {
		return b, fmt.Errorf("history: encoding the header: %w", err)
	}
	b = append(b, j...)
	return append(b, '\n'), nil
}

// isHeaderLine reports whether line, the first of a history, is a header: a
// JSON object with a non-null "header" field (names match case-insensitively,
// as for records). Records never have one.
func isHeaderLine(line []byte) bool {
	if !bytes.Contains(bytes.ToLower(line), []byte("header")) && !bytes.Contains(line, []byte(`\u`)) {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil {
		return false // not a header; the record parser reports the error
	}
	for k, v := range probe {
		if strings.EqualFold(k, "header") && string(v) != "null" {
			return true
		}
	}
	return false
}

// parseHeader decodes a header line.
func parseHeader(line []byte) (*Header, error) {
	var h Header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	if h.Header == "" {
		return nil, fmt.Errorf("header: the \"header\" field must be a non-empty string")
	}
	for k, p := range h.Properties {
		if p.Checker == "" {
			return nil, fmt.Errorf("header: property %d has no checker", k+1)
		}
		if p.Expect != "must-hold" && p.Expect != "may-show-hazard" {
			return nil, fmt.Errorf("header: property %q: expect is %q (want must-hold or may-show-hazard)", p.Checker, p.Expect)
		}
	}
	return &h, nil
}
