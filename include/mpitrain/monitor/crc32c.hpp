// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpitrain {

// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace mpitrain
