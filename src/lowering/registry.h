// The families of ATen lowerings: each src/lowering/<family>.cc defines one
// Register* function that adds its ops to the table. LoweringTable::Get calls
// them all once (explicit calls, no static registrars).
#pragma once

#include "ember/lowering/aten.h"

namespace ember::lowering {

void RegisterElementwise(LoweringTable& t);   // elementwise.cc
void RegisterComparison(LoweringTable& t);    // comparison.cc
void RegisterReduction(LoweringTable& t);     // reduction.cc
void RegisterActivation(LoweringTable& t);    // activation.cc
void RegisterNorm(LoweringTable& t);          // norm.cc
void RegisterLoss(LoweringTable& t);          // loss.cc
void RegisterMatmul(LoweringTable& t);        // matmul.cc
void RegisterDataMovement(LoweringTable& t);  // data_movement.cc
void RegisterIndexing(LoweringTable& t);      // indexing.cc
void RegisterFactory(LoweringTable& t);       // factory.cc
void RegisterForeach(LoweringTable& t);       // foreach.cc
void RegisterRandom(LoweringTable& t);        // random.cc
void RegisterPooling(LoweringTable& t);       // pooling.cc
void RegisterAttention(LoweringTable& t);     // attention.cc
void RegisterAmp(LoweringTable& t);           // amp.cc
void RegisterBarrier(LoweringTable& t);       // barrier.cc

}  // namespace ember::lowering
