package topology

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tree and the nvidia-smi style matrix of every fixture, as goldens.
func TestRenderGolden(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			s := loadFixture(t, name)
			var b bytes.Buffer
			require.NoError(t, WriteTree(&b, s))
			b.WriteString("\n")
			require.NoError(t, WriteMatrix(&b, s, nil))
			checkGolden(t, filepath.Join("golden", name+".topo.txt"), b.Bytes())
		})
	}
}
