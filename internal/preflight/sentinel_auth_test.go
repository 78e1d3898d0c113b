package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/testbed"
)

// TestSentinelCredentials: the sentinels are asked as the sentinel user, as
// go-redis's failover client asks them (FailoverOptions.SentinelUsername),
// never as the data user. A deployment whose data nodes have an ACL user the
// sentinels do not know passes with the sentinels' default user (before,
// preflight sent the data user's AUTH to the sentinels and reported them all
// unreachable: FAIL, while the failover client worked); sentinels that
// require a password are reached with the sentinel password, and without it
// the error says which credentials the sentinels need.
func TestSentinelCredentials(t *testing.T) {
	topo := testbed.Replicated(t, build(), 1, 3)
	ctx := context.Background()
	addrs := testbed.DataUser(t, topo, "svc", "pw") // only the data nodes know svc
	r := runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), Username: "svc", Password: "pw"})
	if r.User != "svc" || r.SentinelUser != "default" {
		t.Errorf("users: data %q, sentinel %q; want svc and default", r.User, r.SentinelUser)
	}
	if c := find(t, r, "sentinel"); c.Status != OK || !strings.Contains(c.Reason, "3/3 sentinels reachable") {
		t.Errorf("sentinels without svc, data user svc: %+v", c)
	}
	if c := find(t, r, "acl/sentinel"); c.Status != OK || !strings.Contains(c.Reason, `user "default"`) {
		t.Errorf("acl/sentinel as the sentinels' default user: %+v", c)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "user svc, sentinel user default)") {
		t.Errorf("the report's first line names both users: %q (%v)", strings.SplitN(text.String(), "\n", 2)[0], err)
	}

	// Sentinels that require a password (their default user's): without it
	// preflight cannot reach the deployment and says what to pass; with it
	// (and the data user still svc) everything is checked.
	testbed.RequireSentinelPassword(t, topo, "spw")
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Run(cctx, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), Username: "svc", Password: "pw", Timeout: time.Second})
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "--sentinel-user") {
		t.Errorf("sentinels requiring a password, none given: %v; want ErrConnect naming --sentinel-user", err)
	}
	r = runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), Username: "svc", Password: "pw", SentinelPassword: "spw"})
	if c := find(t, r, "sentinel"); c.Status != OK || !strings.Contains(c.Reason, "3/3 sentinels reachable") {
		t.Errorf("sentinels with their password: %+v", c)
	}
	if c := find(t, r, "acl/sentinel"); c.Status != OK {
		t.Errorf("acl/sentinel with the sentinels' password: %+v", c)
	}

	// A sentinel user with exactly the rule acl/sentinel recommends (no
	// PING, no CKQUORUM: the failover client sends neither): reachable, its
	// ACL OK, and the quorum a WARN "not checked", never a FAIL (before, a
	// refused PING counted the sentinel unreachable: 0/3, FAIL).
	for _, s := range topo.Sentinels() {
		if err := s.Admin().Do(ctx, "ACL", "SETUSER", "sv", "reset", "on", ">svpw", "+sentinel|get-master-addr-by-name", "+sentinel|sentinels",
			"+subscribe", "&+switch-master", "&+replica-reconf-done").Err(); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	r = runOK(t, Options{Addrs: addrs, MasterName: testbed.MasterName, Dialer: dialer(t, topo), Username: "svc", Password: "pw",
		SentinelUsername: "sv", SentinelPassword: "svpw"})
	if c := find(t, r, "sentinel"); c.Status != Warn || !strings.Contains(c.Reason, "3/3 sentinels reachable") || !strings.Contains(c.Reason, "not checked on 3") {
		t.Errorf("the recommended sentinel user: %+v", c)
	}
	if c := find(t, r, "acl/sentinel"); c.Status != OK || !strings.Contains(c.Reason, `user "sv"`) {
		t.Errorf("acl/sentinel for the recommended sentinel user: %+v", c)
	}
}
