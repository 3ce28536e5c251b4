// Package tenant carries the tenant a call acts for: the daemons' auth
// interceptors put it in the call's context, agentd's thread RPCs compare
// it with the thread's owner, and agentd forwards it to sandboxd in the
// plumb-tenant request header.
package tenant
