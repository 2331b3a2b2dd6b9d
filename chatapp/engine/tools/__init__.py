"""Tools the model may call: chatapp's built-in read-only ones and MCP servers' (issue 38).

`spec` holds what a tool is (name, schema, server) and what a call and its result are;
`builtin` the date and time and reading files under roots the user allows; `servers` reads
`[tools]` and `[mcp_servers.NAME]` from the config and imports the `mcpServers` JSON other
apps use; `mcp_client` talks to one MCP server over stdio or streamable HTTP from plain
threads; `registry` puts them together under one name each. `cost` counts what a schema costs
in prompt tokens through the model's own template.

Nothing here knows the conversation or a backend: the engine renders, the caller approves.
"""
