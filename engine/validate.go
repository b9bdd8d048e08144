package engine

import (
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles one schema document already decoded with exact
// numbers. url is only a name for messages.
func compileSchema(url string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("adding schema: %w", err)
	}
	return c.Compile(url)
}
