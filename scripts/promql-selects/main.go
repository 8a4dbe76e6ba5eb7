// promql-selects parses PromQL with Prometheus's own parser and prints what each expression
// selects, so that tests/docs.rs checks the alerting rules and the dashboard against the series
// the services export with the engine that evaluates them (one PromQL implementation: the
// one promtool is built from).
//
// scripts/promtool.sh builds it beside promtool, as a command of the same Prometheus source
// tree, so it needs no go.mod of its own and resolves the same dependencies.
//
// Input on stdin: a JSON array of expressions. Output on stdout: a JSON array, one object per
// expression, in order: {"error": "..."} when it does not parse, else
// {"selectors": [{"metric": "name", "matchers": [{"label", "value", "equal"}]}],
// "grouping": ["label", ...]} where grouping holds the labels of every aggregation's by/without
// and every binary operation's on/ignoring.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type matcher struct {
	Label string `json:"label"`
	Value string `json:"value"`
	Equal bool   `json:"equal"`
}

type selector struct {
	Metric   string    `json:"metric"`
	Matchers []matcher `json:"matchers"`
}

type selects struct {
	Error     string     `json:"error,omitempty"`
	Selectors []selector `json:"selectors"`
	Grouping  []string   `json:"grouping"`
}

func walk(text string) selects {
	expr, err := parser.ParseExpr(text)
	if err != nil {
		return selects{Error: err.Error()}
	}
	out := selects{Selectors: []selector{}, Grouping: []string{}}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			s := selector{Metric: n.Name, Matchers: []matcher{}}
			for _, m := range n.LabelMatchers {
				// The metric name is the selector's own field, not a label it filters by.
				if m.Name == labels.MetricName {
					continue
				}
				s.Matchers = append(s.Matchers, matcher{m.Name, m.Value, m.Type == labels.MatchEqual})
			}
			out.Selectors = append(out.Selectors, s)
		case *parser.AggregateExpr:
			out.Grouping = append(out.Grouping, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				out.Grouping = append(out.Grouping, n.VectorMatching.MatchingLabels...)
			}
		}
		return nil
	})
	return out
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql-selects: stdin is not a JSON array of strings: %v\n", err)
		os.Exit(2)
	}
	out := make([]selects, 0, len(exprs))
	for _, e := range exprs {
		out = append(out, walk(e))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql-selects: %v\n", err)
		os.Exit(1)
	}
}
