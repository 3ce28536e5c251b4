package ext2fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

const (
	// BlockSize is the file system's block size.
	BlockSize = 4096
	// InodeSize is the size of one on-disk inode.
	InodeSize = 128
	// MinBlocks is the smallest file system Format makes (1 MiB).
	MinBlocks = 256

	blocksPerGroup   = BlockSize * 8 // one block of block bitmap
	maxInodesPerGrp  = BlockSize * 8 // one block of inode bitmap
	inodesPerBlock   = BlockSize / InodeSize
	firstIno         = 11 // the first inode that is not reserved
	rootIno          = 2
	descSize         = 32
	superblockOffset = 1024
	// A last group with fewer data blocks than this is left out.
	minLastGroup = 64
)

// Layout is the geometry Format writes.
type Layout struct {
	Blocks         uint32 // blocks of the file system
	Groups         uint32
	InodesPerGroup uint32
	Inodes         uint32 // Groups × InodesPerGroup
	// RootUID and RootGID own the root directory (0: root). A named
	// volume's root belongs to the sandbox user, who has no CAP_CHOWN.
	RootUID, RootGID uint16
	gdtBlocks        uint32
	itBlocks         uint32 // inode table blocks per group
}

// Plan computes the layout of a file system that fits in size bytes and
// has at most inodes inodes (rounded down to whole inode-table blocks per
// group, at least one block's worth per group).
func Plan(size, inodes int64) (Layout, error) {
	if size < MinBlocks*BlockSize {
		return Layout{}, fmt.Errorf("ext2fs: size %d is under the minimum %d", size, MinBlocks*BlockSize)
	}
	if size/BlockSize > 1<<32-1 {
		return Layout{}, fmt.Errorf("ext2fs: size %d is over 16 TiB", size)
	}
	if inodes < firstIno+1 {
		return Layout{}, fmt.Errorf("ext2fs: %d inodes is under the minimum %d", inodes, firstIno+1)
	}
	blocks := uint32(size / BlockSize)
	groups := (blocks + blocksPerGroup - 1) / blocksPerGroup
	var l Layout
	for {
		l = Layout{Blocks: blocks, Groups: groups}
		l.gdtBlocks = (groups*descSize + BlockSize - 1) / BlockSize
		ipg := min(inodes/int64(groups), maxInodesPerGrp)
		ipg -= ipg % inodesPerBlock
		l.InodesPerGroup = uint32(max(ipg, inodesPerBlock))
		l.itBlocks = l.InodesPerGroup / inodesPerBlock
		// A last group that would hold its metadata and little else is
		// left out, as mke2fs does.
		if g := groups - 1; groups > 1 && l.groupBlocks(g) < l.overhead(g)+minLastGroup {
			groups--
			blocks = groups * blocksPerGroup
			continue
		}
		break
	}
	l.Inodes = l.InodesPerGroup * groups
	if int64(l.Inodes) < firstIno+1 {
		return Layout{}, fmt.Errorf("ext2fs: %d inodes is under the minimum %d", inodes, firstIno+1)
	}
	for g := range groups {
		if l.groupBlocks(g) < l.overhead(g)+1 {
			return Layout{}, fmt.Errorf("ext2fs: %d inodes do not fit in %d bytes", inodes, size)
		}
	}
	return l, nil
}

func (l Layout) groupStart(g uint32) uint32 { return g * blocksPerGroup }

func (l Layout) groupBlocks(g uint32) uint32 {
	return min(l.Blocks-l.groupStart(g), blocksPerGroup)
}

// hasSuper reports whether group g holds a superblock copy (sparse_super:
// groups 0, 1 and powers of 3, 5 and 7).
func hasSuper(g uint32) bool {
	if g <= 1 {
		return true
	}
	for _, b := range []uint32{3, 5, 7} {
		n := b
		for n < g {
			n *= b
		}
		if n == g {
			return true
		}
	}
	return false
}

// overhead is the number of metadata blocks at the start of group g.
func (l Layout) overhead(g uint32) uint32 {
	n := 2 + l.itBlocks // bitmaps and inode table
	if hasSuper(g) {
		n += 1 + l.gdtBlocks
	}
	return n
}

// bitmaps returns the block numbers of group g's block bitmap, inode
// bitmap and inode table.
func (l Layout) bitmaps(g uint32) (bb, ib, it uint32) {
	b := l.groupStart(g)
	if hasSuper(g) {
		b += 1 + l.gdtBlocks
	}
	return b, b + 1, b + 2
}

// Format writes an empty ext2 file system of layout l to w, which must
// read as zeros where Format does not write (a new file truncated to
// l.Blocks × BlockSize bytes or more). The root directory has mode 0755
// and is owned by l.RootUID:l.RootGID (root unless set).
func Format(w io.WriterAt, l Layout, now time.Time) error {
	if l.Groups == 0 || l.InodesPerGroup == 0 {
		return errors.New("ext2fs: empty layout")
	}
	ts := uint32(now.Unix())
	var uuid [16]byte // math/rand/v2: a UUID needs no secrecy, and the agent links no crypto
	binary.LittleEndian.PutUint64(uuid[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(uuid[8:], rand.Uint64())
	le := binary.LittleEndian
	rootBlock := l.groupStart(0) + l.overhead(0)

	// Group descriptors.
	gdt := make([]byte, l.gdtBlocks*BlockSize)
	var freeBlocks, freeInodes uint32
	for g := range l.Groups {
		bb, ib, it := l.bitmaps(g)
		fb := l.groupBlocks(g) - l.overhead(g)
		fi := l.InodesPerGroup
		dirs := uint16(0)
		if g == 0 {
			fb-- // the root directory's block
			fi -= firstIno - 1
			dirs = 1
		}
		freeBlocks += fb
		freeInodes += fi
		d := gdt[g*descSize:]
		le.PutUint32(d[0:], bb)
		le.PutUint32(d[4:], ib)
		le.PutUint32(d[8:], it)
		le.PutUint16(d[12:], uint16(fb))
		le.PutUint16(d[14:], uint16(fi))
		le.PutUint16(d[16:], dirs)

		// Block bitmap: the group's metadata (and in group 0 the root
		// directory's block) in use, and the bits past the group's end.
		bm := make([]byte, BlockSize)
		used := l.overhead(g)
		if g == 0 {
			used++
		}
		setBits(bm, 0, used)
		setBits(bm, l.groupBlocks(g), blocksPerGroup)
		if _, err := w.WriteAt(bm, int64(bb)*BlockSize); err != nil {
			return err
		}
		// Inode bitmap: the reserved inodes in group 0, and the bits
		// past the group's inodes.
		im := make([]byte, BlockSize)
		if g == 0 {
			setBits(im, 0, firstIno-1)
		}
		setBits(im, l.InodesPerGroup, maxInodesPerGrp)
		if _, err := w.WriteAt(im, int64(ib)*BlockSize); err != nil {
			return err
		}
	}

	// Superblock and its copies, each followed by the descriptors.
	sb := make([]byte, 1024)
	le.PutUint32(sb[0:], l.Inodes)
	le.PutUint32(sb[4:], l.Blocks)
	le.PutUint32(sb[12:], freeBlocks)
	le.PutUint32(sb[16:], freeInodes)
	le.PutUint32(sb[20:], 0) // first data block: 0 with 4 KiB blocks
	le.PutUint32(sb[24:], 2) // log2(block size) - 10
	le.PutUint32(sb[28:], 2) // fragment size: the block size
	le.PutUint32(sb[32:], blocksPerGroup)
	le.PutUint32(sb[36:], blocksPerGroup)
	le.PutUint32(sb[40:], l.InodesPerGroup)
	le.PutUint32(sb[48:], ts)     // write time
	le.PutUint16(sb[54:], 0xFFFF) // max mount count: -1, no forced check
	le.PutUint16(sb[56:], 0xEF53) // magic
	le.PutUint16(sb[58:], 1)      // state: clean
	le.PutUint16(sb[60:], 1)      // errors: continue
	le.PutUint32(sb[64:], ts)     // last check
	le.PutUint32(sb[76:], 1)      // revision: dynamic
	le.PutUint32(sb[84:], firstIno)
	le.PutUint16(sb[88:], InodeSize)
	le.PutUint32(sb[96:], 0x0002)  // incompat: filetype
	le.PutUint32(sb[100:], 0x0003) // ro_compat: sparse_super, large_file
	copy(sb[104:], uuid[:])
	copy(sb[120:], "plumb-workspace")
	le.PutUint32(sb[264:], ts) // mkfs time
	for g := range l.Groups {
		if !hasSuper(g) {
			continue
		}
		le.PutUint16(sb[90:], uint16(g)) // block group number of this copy
		off := int64(l.groupStart(g)) * BlockSize
		if g == 0 {
			off += superblockOffset
		}
		if _, err := w.WriteAt(sb, off); err != nil {
			return err
		}
		if _, err := w.WriteAt(gdt, int64(l.groupStart(g)+1)*BlockSize); err != nil {
			return err
		}
	}

	// The root directory: its inode and its one block ("." and "..").
	ino := make([]byte, InodeSize)
	le.PutUint16(ino[0:], 0o40755)
	le.PutUint16(ino[2:], l.RootUID)
	le.PutUint32(ino[4:], BlockSize) // size
	le.PutUint32(ino[8:], ts)        // atime
	le.PutUint32(ino[12:], ts)       // ctime
	le.PutUint32(ino[16:], ts)       // mtime
	le.PutUint16(ino[24:], l.RootGID)
	le.PutUint16(ino[26:], 2) // links: "." and its parent's ".."
	le.PutUint32(ino[28:], BlockSize/512)
	le.PutUint32(ino[40:], rootBlock)
	_, _, it := l.bitmaps(0)
	if _, err := w.WriteAt(ino, int64(it)*BlockSize+(rootIno-1)*InodeSize); err != nil {
		return err
	}
	dir := make([]byte, BlockSize)
	putDirent(dir[0:], rootIno, 12, ".")
	putDirent(dir[12:], rootIno, BlockSize-12, "..")
	if _, err := w.WriteAt(dir, int64(rootBlock)*BlockSize); err != nil {
		return err
	}
	return nil
}

func putDirent(b []byte, ino uint32, recLen uint16, name string) {
	binary.LittleEndian.PutUint32(b[0:], ino)
	binary.LittleEndian.PutUint16(b[4:], recLen)
	b[6] = byte(len(name))
	b[7] = 2 // directory
	copy(b[8:], name)
}

// setBits sets bits [from, to) of bm.
func setBits(bm []byte, from, to uint32) {
	for i := from; i < to; i++ {
		bm[i/8] |= 1 << (i % 8)
	}
}
