package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"

	"github.com/sanqos/sanqos/config"
)

// A policy is the part of the agent's config that a SAN shares: the same
// YAML, restricted to the keys that mean the same on every target host
// (thresholds, objectives, gains, consumer classes, weights,
// reservations). Keys that are a host's own — its devices, listeners,
// backend, interval — stay in each agent's file: a policy naming them is
// refused.
//
// The whole policy lives under one key, <prefix>/policy: it is validated
// as a whole, so it is written as a whole, and a single key is atomic
// without a transaction — whereas one key per resource would need a
// transaction of a thousand puts, past etcd's 128 operations per
// transaction.

// policyTop and policyResource are the keys a policy may set.
var (
	policyTop      = []string{"threshold", "objective", "ewma_alpha", "pid", "throttleable_write_mb_s", "resources"}
	hostOnlyInRes  = []string{"devices", "portals", "consumer_devices"}
	errNotMapping  = errors.New("policy: want a YAML mapping (the agent config's policy keys)")
	errNoResources = errors.New("policy: resources: want a list of resources")
)

// PolicyKey is where the policy lives.
func PolicyKey(prefix string) string {
	return strings.TrimRight(cmp.Or(prefix, DefaultPrefix), "/") + "/policy"
}

// ValidatePolicy checks a policy as package config checks a config file
// (the same parser and validator, so the rules are never written twice),
// plus that it sets only shared keys. Errors name the field and line.
func ValidatePolicy(doc []byte) (*config.Config, error) {
	root, err := parseMapping(doc)
	if err != nil {
		return nil, err
	}
	var errs []error
	if root != nil {
		for i := 0; i+1 < len(root.Content); i += 2 {
			k := root.Content[i]
			if !slices.Contains(policyTop, k.Value) {
				errs = append(errs, config.Error{Line: k.Line, Field: k.Value,
					Msg: "not a policy key (a host's own setting stays in its config file); policy keys: " + strings.Join(policyTop, ", ")})
			}
			if k.Value != "resources" {
				continue
			}
			v := root.Content[i+1]
			if v.Kind != yaml.SequenceNode {
				errs = append(errs, fmt.Errorf("line %d: %w", v.Line, errNoResources))
				continue
			}
			for ri, r := range v.Content {
				if r.Kind != yaml.MappingNode {
					continue // config.Parse names it
				}
				for j := 0; j+1 < len(r.Content); j += 2 {
					if f := r.Content[j]; slices.Contains(hostOnlyInRes, f.Value) {
						errs = append(errs, config.Error{Line: f.Line, Field: fmt.Sprintf("resources[%d].%s", ri, f.Value),
							Msg: "a host's own setting: set it in that agent's config file"})
					}
				}
			}
		}
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy refused: %w", errors.Join(errs...))
	}
	return cfg, nil
}

// parseMapping returns the document's top mapping (nil for an empty one).
func parseMapping(doc []byte) (*yaml.Node, error) {
	var d yaml.Node
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("policy refused: %w", err)
	}
	if d.Kind == 0 || len(d.Content) == 0 {
		return nil, nil
	}
	if d.Content[0].Kind != yaml.MappingNode {
		return nil, errNotMapping
	}
	return d.Content[0], nil
}

// Policies keeps the cluster's policy in etcd.
type Policies struct {
	cli *clientv3.Client
	key string
	log *slog.Logger
}

// NewPolicies returns the policy store under prefix.
func NewPolicies(cli *clientv3.Client, prefix string, log *slog.Logger) *Policies {
	return &Policies{cli: cli, key: PolicyKey(prefix), log: cmp.Or(log, slog.New(slog.DiscardHandler))}
}

// Put validates doc and, only if it is valid, writes it; a refused policy
// writes nothing. It returns the revision written.
func (p *Policies) Put(ctx context.Context, doc []byte) (int64, error) {
	return p.put(ctx, doc, -1)
}

// PutIf is Put only if the stored policy is still at revision rev (0: none
// stored yet), so two operators' edits cannot silently overwrite each other.
func (p *Policies) PutIf(ctx context.Context, doc []byte, rev int64) (int64, error) {
	return p.put(ctx, doc, rev)
}

func (p *Policies) put(ctx context.Context, doc []byte, rev int64) (int64, error) {
	if _, err := ValidatePolicy(doc); err != nil {
		return 0, err
	}
	txn := p.cli.Txn(ctx)
	if rev >= 0 {
		txn = txn.If(clientv3.Compare(clientv3.ModRevision(p.key), "=", rev))
	}
	resp, err := txn.Then(clientv3.OpPut(p.key, string(doc))).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("policy changed since revision %d: read it again", rev)
	}
	return resp.Header.Revision, nil
}

// Get returns the stored policy and its revision (nil, 0: none).
func (p *Policies) Get(ctx context.Context) ([]byte, int64, error) {
	resp, err := p.cli.Get(ctx, p.key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// Watch delivers the stored policy, then every change, to apply until ctx
// ends. A policy that fails validation when read (written by something
// other than Put), or that apply refuses (e.g. it does not merge with the
// agent's own config), is logged and passed to refused; the agent keeps
// the policy it has. Deleting the policy also keeps it: an absent policy
// is no instruction to drop every threshold.
func (p *Policies) Watch(ctx context.Context, apply func(doc []byte, rev int64) error, refused func(rev int64, err error)) {
	var last int64
	deliver := func(doc []byte, rev int64) {
		if rev == last {
			return
		}
		last = rev
		err := func() error {
			if _, err := ValidatePolicy(doc); err != nil {
				return err
			}
			return apply(doc, rev)
		}()
		if err != nil {
			p.log.Error("policy refused; keeping the current one", "revision", rev, "err", err)
			if refused != nil {
				refused(rev, err)
			}
			return
		}
		p.log.Info("policy applied", "revision", rev)
	}
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := p.cli.Get(gctx, p.key)
		cancel()
		if err != nil {
			RealTime{}.Sleep(ctx, retryPace, nil)
			continue
		}
		if len(resp.Kvs) > 0 {
			deliver(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		}
		for wr := range p.cli.Watch(ctx, p.key, clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					p.log.Warn("policy deleted from etcd; keeping the current one")
					continue
				}
				deliver(ev.Kv.Value, ev.Kv.ModRevision)
			}
		}
	}
}

// MergeFile merges policy into the agent's config file at path (see
// Merge), keeping what config.Load adds (the token, the source path).
func MergeFile(path string, policy []byte) (*config.Config, error) {
	own, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Merge(b, policy)
	if err != nil {
		return nil, err
	}
	cfg.SourcePath, cfg.Token = own.SourcePath, own.Token
	return cfg, nil
}

// Merge lays a policy over an agent's own config and validates the result
// as a whole with package config. The policy's top-level keys replace the
// agent's; its resources replace the same-named resources' keys one by one
// (the agent keeps its devices) and are added where the agent has none of
// that name — except with static discovery, whose resources need devices
// the policy cannot name: those are left to the agents that list them.
func Merge(local, policy []byte) (*config.Config, error) {
	pol, err := parseMapping(policy)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(local, &doc); err != nil {
		return nil, fmt.Errorf("own config: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	own := doc.Content[0]
	if own.Kind != yaml.MappingNode {
		return nil, errors.New("own config: not a mapping")
	}
	ownCfg, err := config.Parse(local)
	if err != nil {
		return nil, fmt.Errorf("own config: %w", err)
	}
	static := ownCfg.Discovery.Source == "static"
	if pol != nil {
		for i := 0; i+1 < len(pol.Content); i += 2 {
			k, v := pol.Content[i], pol.Content[i+1]
			if k.Value != "resources" {
				setKey(own, k.Value, v)
				continue
			}
			ownRes := get(own, "resources")
			if ownRes == nil {
				ownRes = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
				setKey(own, "resources", ownRes)
			}
			for _, pr := range v.Content {
				name := get(pr, "name")
				var match *yaml.Node
				for _, or := range ownRes.Content {
					if n := get(or, "name"); n != nil && name != nil && n.Value == name.Value {
						match = or
					}
				}
				switch {
				case match != nil:
					for j := 0; j+1 < len(pr.Content); j += 2 {
						setKey(match, pr.Content[j].Value, pr.Content[j+1])
					}
				case !static:
					ownRes.Content = append(ownRes.Content, pr)
				}
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	cfg, err := config.Parse(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("policy does not fit this agent's config: %w", err)
	}
	return cfg, nil
}

func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}
