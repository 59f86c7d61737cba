package pg

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
)

// UniqueIDBytes is the size of a unique id (GOTREE_UNIQUE_ID_BYTES).
const UniqueIDBytes = 128

// UniqueID names one communicator: where its bootstrap root listens and the
// secret every connection must prove. Layout (little endian):
//
//	0  "GTID"   magic
//	4  1        version
//	5  n        IP length (4 or 16)
//	6  port     uint16
//	8  ip       16 bytes
//	24 secret   32 bytes
//	56 zero     to 128
type UniqueID [UniqueIDBytes]byte

const uidVersion = 1

type uidFields struct {
	Addr   *net.TCPAddr
	Secret [32]byte
}

func encodeUID(f uidFields) UniqueID {
	var u UniqueID
	copy(u[0:4], "GTID")
	u[4] = uidVersion
	ip := f.Addr.IP
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	u[5] = byte(len(ip))
	binary.LittleEndian.PutUint16(u[6:8], uint16(f.Addr.Port))
	copy(u[8:24], ip)
	copy(u[24:56], f.Secret[:])
	return u
}

func decodeUID(u UniqueID) (uidFields, error) {
	var f uidFields
	if string(u[0:4]) != "GTID" {
		return f, fmt.Errorf("%w: unique id does not start with GTID (not made by gotree_get_unique_id, or corrupted in transit)", ErrInvalidArgument)
	}
	if u[4] != uidVersion {
		return f, fmt.Errorf("%w: unique id version %d, this library understands %d", ErrInvalidArgument, u[4], uidVersion)
	}
	n := int(u[5])
	if n != 4 && n != 16 {
		return f, fmt.Errorf("%w: unique id has a bad address length %d", ErrInvalidArgument, n)
	}
	ip := make(net.IP, n)
	copy(ip, u[8:8+n])
	f.Addr = &net.TCPAddr{IP: ip, Port: int(binary.LittleEndian.Uint16(u[6:8]))}
	copy(f.Secret[:], u[24:56])
	return f, nil
}

func newSecret() ([32]byte, error) {
	var s [32]byte
	_, err := rand.Read(s[:])
	return s, err
}
