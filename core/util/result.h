#pragma once
#include "kernels/result.h"  // Result<T>, Status, Error, make_error, FTX_TRY
