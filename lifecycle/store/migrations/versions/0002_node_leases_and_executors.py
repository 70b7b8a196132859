"""Node leases (one run per node) and the executors that run workflows, with their heartbeats.

These tables reached main before migrations did; a store made then (the
initial tables plus these two, no version table) is stamped with this
revision. Revision 0002, after 0001; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_executors',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('role', sa.String(length=100), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('pid_start', sa.String(length=32), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('racklife_leases',
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('workflow', sa.String(length=64), nullable=False),
    sa.Column('taken_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
    sa.PrimaryKeyConstraint('node')
    )
    with op.batch_alter_table('racklife_leases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_leases_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('racklife_leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_leases_run_id'))

    op.drop_table('racklife_leases')
    op.drop_table('racklife_executors')
