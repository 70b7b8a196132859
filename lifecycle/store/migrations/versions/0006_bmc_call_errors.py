"""Failed BMC calls by node, vendor and class, and the vendor each node's BMC last named.

For the metrics' BMC call errors by vendor and class (docs/observability.md).
Revision 0006, after 0005; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_bmc_call_errors',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('hardware_type', sa.String(length=16), nullable=False),
    sa.Column('vendor', sa.String(length=64), nullable=False),
    sa.Column('error_class', sa.String(length=32), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('racklife_bmc_call_errors', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_bmc_call_errors_node'), ['node'], unique=False)
    op.create_table('racklife_bmc_vendors',
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('hardware_type', sa.String(length=16), nullable=False),
    sa.Column('vendor', sa.String(length=64), nullable=False),
    sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('node')
    )


def downgrade() -> None:
    op.drop_table('racklife_bmc_vendors')
    with op.batch_alter_table('racklife_bmc_call_errors', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_bmc_call_errors_node'))
    op.drop_table('racklife_bmc_call_errors')
